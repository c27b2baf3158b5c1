//! The seeded generator the demo and benchmark generators use; it lives in `infersight-sim`
//! (the simulator needs byte-identical output per seed too) and is re-exported here.

pub use infersight_sim::Rng;
