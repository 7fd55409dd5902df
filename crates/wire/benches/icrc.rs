//! Placeholder; the full benchmark lands with the wire crate's proof.
fn main() {}
