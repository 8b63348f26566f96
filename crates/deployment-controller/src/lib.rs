//! The library half of the `deployment-controller` binary: the pieces of its command line
//! that are tested and fuzzed on their own.

pub mod duration;
