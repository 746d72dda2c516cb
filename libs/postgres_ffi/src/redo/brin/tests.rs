//! BRIN redo on hand-made records: what the real-WAL fixtures cannot reach.
