//! nave-sim.
