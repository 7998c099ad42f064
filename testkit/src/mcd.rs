//! A MultiClusterDeployment fixture builder.

use nave_api::MultiClusterDeployment;
use serde_json::{Map, Value, json};

/// A MultiClusterDeployment as a test wants it, every unset part a plain default: namespace
/// `default`, 1 replica, `{"policy": "spread"}`, one container `app` running `nginx:1.27` and
/// requesting `100m` CPU and `64Mi`, labelled `app: <name>`.
///
/// ```
/// use nave_testkit::Mcd;
///
/// let web = Mcd::new("web").namespace("shop").replicas(6).cpu("500m").build();
/// assert_eq!(web.spec.replicas, 6);
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Mcd {
    name: String,
    namespace: String,
    generation: Option<i64>,
    replicas: i64,
    placement: Value,
    image: String,
    requests: Map<String, Value>,
    env_from: Vec<Value>,
    extra: Map<String, Value>,
}

impl Mcd {
    /// The MultiClusterDeployment `name`, with the defaults above.
    pub fn new(name: &str) -> Mcd {
        let mut requests = Map::new();
        requests.insert("cpu".to_owned(), json!("100m"));
        requests.insert("memory".to_owned(), json!("64Mi"));
        Mcd {
            name: name.to_owned(),
            namespace: "default".to_owned(),
            generation: None,
            replicas: 1,
            placement: json!({"policy": "spread"}),
            image: "nginx:1.27".to_owned(),
            requests,
            env_from: Vec::new(),
            extra: Map::new(),
        }
    }

    /// Its namespace.
    pub fn namespace(mut self, namespace: &str) -> Mcd {
        self.namespace = namespace.to_owned();
        self
    }

    /// `metadata.generation`, as the API server would have set it (for tests without one).
    pub fn generation(mut self, generation: i64) -> Mcd {
        self.generation = Some(generation);
        self
    }

    /// `spec.replicas`: the total across clusters.
    pub fn replicas(mut self, replicas: impl Into<i64>) -> Mcd {
        self.replicas = replicas.into();
        self
    }

    /// `spec.placement.policy`, keeping the rest of the placement.
    pub fn policy(mut self, policy: &str) -> Mcd {
        self.placement["policy"] = json!(policy);
        self
    }

    /// `spec.placement` as given, replacing the default.
    pub fn placement(mut self, placement: Value) -> Mcd {
        self.placement = placement;
        self
    }

    /// The container's image.
    pub fn image(mut self, image: &str) -> Mcd {
        self.image = image.to_owned();
        self
    }

    /// The container's CPU request.
    pub fn cpu(mut self, cpu: &str) -> Mcd {
        self.requests.insert("cpu".to_owned(), json!(cpu));
        self
    }

    /// The container's memory request.
    pub fn memory(mut self, memory: &str) -> Mcd {
        self.requests.insert("memory".to_owned(), json!(memory));
        self
    }

    /// The container's requests as given (`{}`: no `resources` at all).
    pub fn requests(mut self, requests: Value) -> Mcd {
        self.requests = match requests {
            Value::Object(requests) => requests,
            other => panic!("requests are an object, not {other}"),
        };
        self
    }

    /// Adds the ConfigMap `name` to the container's `envFrom`.
    pub fn env_from_config_map(mut self, name: &str) -> Mcd {
        self.env_from.push(json!({"configMapRef": {"name": name}}));
        self
    }

    /// Adds the Secret `name` to the container's `envFrom`.
    pub fn env_from_secret(mut self, name: &str) -> Mcd {
        self.env_from.push(json!({"secretRef": {"name": name}}));
        self
    }

    /// `spec.overrides`: per-cluster RFC 6902 patches.
    pub fn overrides(self, overrides: Value) -> Mcd {
        self.extra_spec(json!({"overrides": overrides}))
    }

    /// Top-level fields of `spec` as given, replacing what the builder would write (any field
    /// it has no method for; `spec.template` to write the template by hand).
    pub fn extra_spec(mut self, extra: Value) -> Mcd {
        match extra {
            Value::Object(extra) => self.extra.extend(extra),
            other => panic!("extra spec fields are an object, not {other}"),
        }
        self
    }

    /// The `spec` as JSON, as a user writes it (for bodies of the REST API, or to spoil a field).
    pub fn spec(&self) -> Value {
        let name = &self.name;
        let mut container = json!({"name": "app", "image": self.image});
        if !self.requests.is_empty() {
            container["resources"] = json!({"requests": self.requests});
        }
        if !self.env_from.is_empty() {
            container["envFrom"] = json!(self.env_from);
        }
        let mut spec = json!({
            "replicas": self.replicas,
            "placement": self.placement,
            "template": {"spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [container]}
                }
            }}
        });
        if let Some(spec) = spec.as_object_mut() {
            spec.extend(self.extra.clone());
        }
        spec
    }

    /// The MultiClusterDeployment.
    pub fn build(&self) -> MultiClusterDeployment {
        let mut metadata = json!({"name": self.name, "namespace": self.namespace});
        if let Some(generation) = self.generation {
            metadata["generation"] = json!(generation);
        }
        serde_json::from_value(json!({
            "apiVersion": nave_api::API_VERSION,
            "kind": "MultiClusterDeployment",
            "metadata": metadata,
            "spec": self.spec(),
        }))
        .unwrap_or_else(|e| panic!("{} is not a MultiClusterDeployment: {e}", self.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_make_one_spread_nginx_replica_requesting_100m_and_64mi() {
        assert_eq!(
            Mcd::new("web").spec(),
            json!({
                "replicas": 1,
                "placement": {"policy": "spread"},
                "template": {"spec": {
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {
                        "metadata": {"labels": {"app": "web"}},
                        "spec": {"containers": [{
                            "name": "app", "image": "nginx:1.27",
                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}
                        }]}
                    }
                }}
            })
        );
    }

    #[test]
    fn every_setter_shows_in_the_built_object() {
        let mcd = Mcd::new("site")
            .namespace("shop")
            .generation(3)
            .replicas(6)
            .placement(json!({"policy": "spread", "maxClusters": 2}))
            .policy("best-fit")
            .image("nginx:1.27-alpine")
            .cpu("500m")
            .memory("128Mi")
            .env_from_config_map("site-config")
            .env_from_secret("site-secret")
            .overrides(json!([{"clusters": ["eu-1"], "patches": []}]))
            .build();
        assert_eq!(mcd.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(mcd.metadata.generation, Some(3));
        assert_eq!(mcd.spec.replicas, 6);
        let spec = serde_json::to_value(&mcd.spec).unwrap();
        assert_eq!(spec["placement"]["policy"], "best-fit");
        assert_eq!(spec["placement"]["maxClusters"], 2);
        assert_eq!(spec["overrides"][0]["clusters"], json!(["eu-1"]));
        let container = &spec["template"]["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["image"], "nginx:1.27-alpine");
        assert_eq!(
            container["resources"]["requests"],
            json!({"cpu": "500m", "memory": "128Mi"})
        );
        assert_eq!(
            container["envFrom"],
            json!([{"configMapRef": {"name": "site-config"}}, {"secretRef": {"name": "site-secret"}}])
        );
    }

    #[test]
    fn empty_requests_leave_out_the_resources() {
        let spec = Mcd::new("web").requests(json!({})).spec();
        let container = &spec["template"]["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container.get("resources"), None, "{container}");
    }
}
