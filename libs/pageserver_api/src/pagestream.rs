//! Pagestream v2/v3 wire codec (see docs/protocol.md).
