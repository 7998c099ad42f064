//! Custom resource schemas: structural `openAPIV3Schema` compiled once per CRD version, then used to
//! prune unknown fields, apply defaults and validate objects (OpenAPI constraints and CEL
//! `x-kubernetes-validations`), with upstream-shaped field errors.
//!
//! ```text
//!  CRD version schema ──► Schema::compile ──► Node tree (+ compiled CEL programs)
//!                                               │
//!  write body ──► prune ──► default ──► validate(obj, old) ──► Vec<FieldError> ──► 422 causes
//! ```
//!
//! Order and semantics follow `apiextensions-apiserver`: pruning keeps `apiVersion`, `kind` and the
//! `ObjectMeta` fields of `metadata` at the root and in embedded resources, honours
//! `x-kubernetes-preserve-unknown-fields` and drops `null`s of non-nullable fields without default;
//! defaulting fills absent (and non-nullable `null`) fields; validation reports OpenAPI errors,
//! `x-kubernetes-list-type` duplicates, embedded-resource `apiVersion`/`kind`, then CEL rules (which
//! are skipped, as upstream does, when a blocking error such as a wrong type was already found).

use std::sync::Arc;

use serde_json::Value;

use crate::fieldpath::{ListType, ListTypes, Step};

mod cel;
mod compile;
mod gofmt;
mod prune;
mod validate;

#[cfg(test)]
mod tests;

use compile::{Additional, ListKind, Node, Ty};

/// A schema that could not be compiled (the CRD is rejected with this message).
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{0}")]
pub struct SchemaError(pub String);

/// One invalid field, shaped like upstream `field.Error`.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// The field path, e.g. `spec.replicas`.
    pub field: String,
    /// Upstream error type: `FieldValueInvalid`, `FieldValueRequired`, `FieldValueNotSupported`, ...
    pub reason: &'static str,
    /// The whole upstream message, e.g. `spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0`.
    pub message: String,
}

/// Joins field errors the way upstream `ErrorList.ToAggregate().Error()` does: one message as-is,
/// several as `[a, b]`, duplicates dropped.  This is the text after `... is invalid: ` in a 422.
pub fn aggregate_messages(errs: &[FieldError]) -> String {
    let mut msgs: Vec<&str> = Vec::new();
    for e in errs {
        if !msgs.contains(&e.message.as_str()) {
            msgs.push(&e.message);
        }
    }
    if msgs.len() == 1 {
        msgs[0].to_owned()
    } else {
        format!("[{}]", msgs.join(", "))
    }
}

/// A compiled CRD version schema.
#[derive(Debug, Clone)]
pub struct Schema {
    root: Arc<Node>,
}

impl Schema {
    /// Compiles an `openAPIV3Schema`, including its CEL rules.  Error paths start at
    /// `openAPIV3Schema`; use [`Schema::compile_at`] for paths under a CRD version.
    pub fn compile(open_api_v3_schema: &Value) -> Result<Schema, SchemaError> {
        Schema::compile_at(open_api_v3_schema, "openAPIV3Schema")
            .map_err(|errs| SchemaError(aggregate_messages(&errs)))
    }

    /// Compiles an `openAPIV3Schema` whose field path in the CRD is `path`
    /// (e.g. `spec.versions[0].schema.openAPIV3Schema`), returning every error as a field error
    /// (the causes of the 422 on CRD create/update).
    pub fn compile_at(open_api_v3_schema: &Value, path: &str) -> Result<Schema, Vec<FieldError>> {
        compile::compile_root(open_api_v3_schema, path).map(|root| Schema { root: Arc::new(root) })
    }

    /// Removes fields the schema does not know (unless `x-kubernetes-preserve-unknown-fields`).
    /// `metadata` is left alone except for its standard fields.
    pub fn prune(&self, obj: &mut Value) {
        let _ = self.prune_unknown(obj);
    }

    /// Like [`Schema::prune`], returning the paths of the removed fields (`spec.foo`,
    /// `spec.items[0].bar`, `metadata.foo`) for `fieldValidation=Strict|Warn`
    /// (`unknown field "spec.foo"`).
    pub fn prune_unknown(&self, obj: &mut Value) -> Vec<String> {
        let mut unknown = Vec::new();
        prune::prune_value(obj, &self.root, true, "", &mut unknown);
        prune::drop_non_nullable_nulls(obj, &self.root);
        unknown
    }

    /// Fills in `default`s, recursively, as upstream does after pruning.
    pub fn default(&self, obj: &mut Value) {
        prune::default_value(obj, &self.root);
    }

    /// Validates `obj` (and, for CEL transition rules, `old`): every error found, not just the first.
    pub fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
        let mut errs = validate::openapi_errors(&self.root, obj, None);
        validate::list_errors(&self.root, obj, "", &mut errs);
        validate::embedded_errors(&self.root, obj, "", &mut errs);
        if self.root.subtree_rules {
            let blocking = errs.iter().any(|e| {
                matches!(
                    e.reason,
                    "FieldValueNotSupported"
                        | "FieldValueRequired"
                        | "FieldValueTooLong"
                        | "FieldValueTooMany"
                        | "FieldValueTypeInvalid"
                )
            });
            if blocking {
                errs.push(gofmt::invalid(
                    "<nil>",
                    gofmt::Bad::Null,
                    "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
                ));
            } else {
                let mut budget = cel::Budget {
                    remaining: cel::TOTAL_COST_BUDGET,
                    exhausted: false,
                };
                cel::validate_cel(&self.root, obj, old, None, true, &mut budget, &mut errs);
            }
        }
        errs
    }

    /// Whether the schema has any `x-kubernetes-validations` rule.
    pub fn has_rules(&self) -> bool {
        self.root.subtree_rules
    }

    fn node_at(&self, path: &[Step]) -> Option<&Node> {
        let mut cur: &Node = &self.root;
        for step in path {
            cur = match step {
                Step::Field(name) => cur.field(name)?,
                Step::Item => cur.items.as_deref()?,
            };
        }
        Some(cur)
    }
}

impl ListTypes for Schema {
    fn list_type(&self, path: &[Step]) -> Option<ListType> {
        let node = self.node_at(path)?;
        if node.ty != Some(Ty::Array) {
            return None;
        }
        Some(match node.list_type {
            Some(ListKind::Set) => ListType::Set,
            Some(ListKind::Map) => ListType::Map(node.list_map_keys.clone()),
            Some(ListKind::Atomic) | None => ListType::Atomic,
        })
    }

    fn map_is_atomic(&self, path: &[Step]) -> bool {
        self.node_at(path).is_some_and(|n| n.map_atomic)
    }

    fn smp_merge_key(&self, _path: &[Step]) -> Option<String> {
        // Strategic merge patch is not supported for custom resources (the server answers 415).
        None
    }
}

impl Schema {
    /// Whether the object at `path` keeps unknown fields (`x-kubernetes-preserve-unknown-fields`,
    /// or `additionalProperties: true`).
    pub fn preserves_unknown_fields(&self, path: &[Step]) -> bool {
        self.node_at(path)
            .is_some_and(|n| n.preserve_unknown || matches!(n.additional, Additional::Any))
    }
}
