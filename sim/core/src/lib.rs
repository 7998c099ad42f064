//! Pure Kubernetes object semantics for `nave-sim`: everything an API server does to a JSON object
//! that needs no IO, so that it can be tested in microseconds.
//!
//! ```text
//!  request body ──► patch::{merge,json,strategic} ──┐
//!                   ssa::apply (managedFields)    ──┼──► schema::{prune, default, validate (incl. CEL)}
//!                                                   │              │
//!  list/watch   ◄── selector::{LabelSelector, FieldSelector} ◄── stored object
//! ```
//!
//! The server crate (`nave-sim`) owns storage, resourceVersions, HTTP and controllers; this crate
//! owns the rules.  Every function here takes and returns `serde_json::Value`s.

#![forbid(unsafe_code)]

pub mod fieldpath;
pub mod patch;
/// Resource quantities (`format: quantity` in schemas), from the crate that also counts pod requests.
pub use nave_resources::quantity;
pub mod schema;
pub mod selector;
pub mod ssa;
