//! What the REST handlers read.

use std::sync::Arc;

use crate::fleet::Sources;
use crate::store::Store;

/// State of the REST handlers.
#[derive(Clone, Debug)]
pub struct RestState {
    /// What placement reads (the fleet, the index, health, usage), as the controller sees it.
    pub(super) sources: Sources,
    /// Placements, their history, heartbeats.
    pub(super) store: Arc<dyn Store>,
    /// The OpenAPI document, serialized once.
    pub(super) document: Arc<str>,
}
