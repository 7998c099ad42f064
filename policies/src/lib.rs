//! Nave placement engine.
