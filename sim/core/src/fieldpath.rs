//! How lists inside an object merge: the list-type information that both strategic merge patch and
//! server-side apply need, for built-in kinds (from the upstream struct tags) and for custom resources
//! (from `x-kubernetes-list-type` / `x-kubernetes-list-map-keys` / `x-kubernetes-map-type`).

/// How a list field merges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListType {
    /// The whole list is one value: replaced as a unit, owned by one manager.
    Atomic,
    /// A set of scalars: elements are merged by value.
    Set,
    /// An associative list: elements are merged by the values of these keys.
    Map(Vec<String>),
}

/// One step of a path into an object, as used to look up list types.  List elements are `Item`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A field of an object.
    Field(String),
    /// Any element of a list.
    Item,
}

/// Answers "how does the list at this path merge?" for one kind.
pub trait ListTypes: Send + Sync {
    /// The list type at `path`, or `None` when the path is not known to be a list (treated as atomic).
    fn list_type(&self, path: &[Step]) -> Option<ListType>;
    /// Whether the map (object) at `path` is atomic (`x-kubernetes-map-type: atomic`).
    fn map_is_atomic(&self, _path: &[Step]) -> bool {
        false
    }
    /// The strategic-merge-patch merge key of the list at `path` (SMP only; may differ from SSA keys).
    fn smp_merge_key(&self, path: &[Step]) -> Option<String>;
}

/// List types of a built-in kind (Appendix C of KUBE-SIM.md), keyed by API group and kind.
/// Unknown kinds get an implementation under which every list is atomic.
pub fn builtin(group: &str, kind: &str) -> Box<dyn ListTypes> {
    crate::patch::builtin_list_types(group, kind)
}
