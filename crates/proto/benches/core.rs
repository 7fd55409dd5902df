//! Transport core benchmark (written with the transport proof).
fn main() {}
