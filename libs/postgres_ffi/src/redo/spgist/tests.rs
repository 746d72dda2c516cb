//! SP-GiST redo unit tests.
