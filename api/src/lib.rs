//! Nave custom resources.
