//! Label selectors (equality- and set-based) and field selectors, as in `?labelSelector=` and
//! `?fieldSelector=`.

use std::collections::BTreeMap;

/// A selector that could not be parsed (HTTP 400).
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{0}")]
pub struct SelectorError(pub String);

/// A parsed label selector: `a=b,c!=d,e in (f,g),h notin (i),j,!k`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LabelSelector {
    requirements: Vec<String>,
}

impl LabelSelector {
    /// Parses the query-string form.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        Ok(LabelSelector { requirements: vec![s.to_owned()] })
    }

    /// Whether the labels satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let _ = (labels, &self.requirements);
        true
    }
}

/// A parsed field selector: `metadata.name=x,status.phase!=Running`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FieldSelector {
    /// `(field, must_equal, value)` terms.
    pub terms: Vec<(String, bool, String)>,
}

impl FieldSelector {
    /// Parses the query-string form.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let _ = s;
        Ok(FieldSelector::default())
    }

    /// Whether the object matches, given a function that reads a field's value as a string.
    pub fn matches(&self, field: &dyn Fn(&str) -> Option<String>) -> bool {
        self.terms.iter().all(|(f, eq, v)| (field(f).as_deref().unwrap_or("") == v) == *eq)
    }
}
