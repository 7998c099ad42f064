//! How lists inside an object merge: the list-type information that both strategic merge patch and
//! server-side apply need, for built-in kinds (from the upstream struct tags) and for custom resources
//! (from `x-kubernetes-list-type` / `x-kubernetes-list-map-keys` / `x-kubernetes-map-type`).
//!
//! Also home of the field-set model server-side apply keeps per manager ([`FieldSet`],
//! [`PathElement`]) and its `FieldsV1` wire encoding, after structured-merge-diff's `fieldpath`
//! package.

use serde_json::Value;

mod builtin;
mod set;

pub use builtin::BuiltinListTypes;
pub use set::{FieldNode, FieldSet, FieldsV1Error, PathElement, display_path};
pub(crate) use set::{go_quote, value_cmp};

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

/// How strategic merge patch treats a list (the `patchStrategy` / `patchMergeKey` struct tags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SmpListStrategy {
    /// No strategy: the patch's list replaces the original one.
    Replace,
    /// `patchStrategy:"merge"` with `patchMergeKey`: list elements (objects) merge by this key.
    MergeByKey(String),
    /// `patchStrategy:"merge"` on a list of scalars (e.g. `metadata.finalizers`): union.
    MergePrimitives,
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

    /// The strategic-merge-patch strategy of the list at `path`.  By default: merge by
    /// [`ListTypes::smp_merge_key`] when there is one, union for SSA sets, replace otherwise.
    fn smp_list_strategy(&self, path: &[Step]) -> SmpListStrategy {
        match self.smp_merge_key(path) {
            Some(key) => SmpListStrategy::MergeByKey(key),
            None if self.list_type(path) == Some(ListType::Set) => SmpListStrategy::MergePrimitives,
            None => SmpListStrategy::Replace,
        }
    }

    /// The default of a key field of an associative list, used when an element omits it
    /// (e.g. `protocol: TCP` for container and service ports), so that `{containerPort: 80}` and
    /// `{containerPort: 80, protocol: TCP}` are the same element.
    fn map_key_default(&self, _list_path: &[Step], _key: &str) -> Option<Value> {
        None
    }

    /// Top-level fields that an empty object of this kind already has (Go struct fields such as
    /// `spec` and `status` of built-in kinds).  Creating an object does not count as adding these
    /// maps themselves, so managedFields get no `".": {}` marker for them, as upstream.
    fn preexisting_top_level_fields(&self) -> &[&str] {
        &[]
    }
}

/// List types of a built-in kind (the `listType`/`listMapKeys` markers of its Go types), keyed by API group and kind.
/// Unknown kinds get an implementation under which every list is atomic (except the `metadata`
/// lists every kind shares: `finalizers` set, `ownerReferences` map by `uid`).
pub fn builtin(group: &str, kind: &str) -> Box<dyn ListTypes> {
    crate::patch::builtin_list_types(group, kind)
}

#[cfg(test)]
mod tests;
