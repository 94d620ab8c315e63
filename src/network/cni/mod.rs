//! A CNI client (CNI specification 1.0 and 1.1, and the older versions the
//! common plugins still accept), written for nidus: it runs the plugins of a
//! network configuration list in order for ADD (each gets the previous one's
//! result as `prevResult`), in reverse order for DEL (with the cached result),
//! and in order for CHECK; each plugin gets the runtime config its
//! `capabilities` ask for.

pub(crate) mod conf;
pub(crate) mod exec;
pub(crate) mod result;
pub(crate) mod version;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::linux::reaper::Reaper;

pub(crate) use conf::NetworkList;
use exec::{Invocation, PluginError};

#[derive(Debug, thiserror::Error)]
pub(crate) enum CniError {
    #[error("CNI plugin {0:?} not found in the plugin directories")]
    PluginNotFound(String),
    #[error(transparent)]
    Plugin(#[from] PluginError),
}

/// Runs plugins from `bin_dirs`, each within `timeout`.
#[derive(Clone)]
pub(crate) struct CniClient {
    pub(crate) bin_dirs: Vec<PathBuf>,
    pub(crate) timeout: Duration,
    pub(crate) reaper: Reaper,
}

/// What every plugin run for one pod shares.
#[derive(Debug, Clone)]
pub(crate) struct PodArgs {
    pub(crate) container_id: String,
    /// The pod's network namespace; empty when it is gone.
    pub(crate) netns: String,
    pub(crate) ifname: String,
    /// `CNI_ARGS`.
    pub(crate) args: String,
    /// Runtime config by capability name (portMappings, dns, …).
    pub(crate) runtime_config: Map<String, Value>,
}

impl CniClient {
    /// ADD through the whole list; returns the last plugin's result. A
    /// failure is returned as is: the caller undoes the attachment with DEL.
    pub(crate) async fn add(&self, list: &NetworkList, pod: &PodArgs) -> Result<Value, CniError> {
        let mut prev: Option<Value> = None;
        for plugin in &list.plugins {
            let config = plugin_config(list, plugin, prev.as_ref(), &pod.runtime_config);
            let out = self.run_plugin("ADD", plugin, pod, &config).await?;
            // A plugin that prints nothing passes the previous result on.
            if !out.is_null() {
                prev = Some(out);
            }
        }
        Ok(prev.unwrap_or(Value::Null))
    }

    /// DEL through the list in reverse order, with `cached` (the ADD result)
    /// as prevResult where the version has it. Every plugin is run even if
    /// one fails, so what can be released is; the first error is returned.
    pub(crate) async fn del(&self, list: &NetworkList, pod: &PodArgs, cached: Option<&Value>) -> Result<(), CniError> {
        let prev = cached.filter(|c| !c.is_null() && version::has_check(&list.cni_version));
        let mut first_error = None;
        for plugin in list.plugins.iter().rev() {
            let config = plugin_config(list, plugin, prev, &pod.runtime_config);
            if let Err(e) = self.run_plugin("DEL", plugin, pod, &config).await {
                tracing::warn!(pod_id = %pod.container_id, error = %e, "CNI DEL failed");
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// CHECK through the list, when its version has CHECK and it does not
    /// disable it; `Ok(false)` when no check was made.
    pub(crate) async fn check(&self, list: &NetworkList, pod: &PodArgs, cached: &Value) -> Result<bool, CniError> {
        if !version::has_check(&list.cni_version) || list.disable_check || cached.is_null() {
            return Ok(false);
        }
        for plugin in &list.plugins {
            let config = plugin_config(list, plugin, Some(cached), &pod.runtime_config);
            self.run_plugin("CHECK", plugin, pod, &config).await?;
        }
        Ok(true)
    }

    async fn run_plugin(
        &self,
        command: &'static str,
        plugin: &Map<String, Value>,
        pod: &PodArgs,
        config: &Value,
    ) -> Result<Value, CniError> {
        let kind = plugin.get("type").and_then(Value::as_str).unwrap_or_default();
        let program = conf::find_plugin(kind, &self.bin_dirs).ok_or_else(|| CniError::PluginNotFound(kind.into()))?;
        let invocation = Invocation {
            command,
            container_id: &pod.container_id,
            netns: &pod.netns,
            ifname: &pod.ifname,
            args: &pod.args,
            bin_dirs: &self.bin_dirs,
        };
        let started = std::time::Instant::now();
        let out = exec::run(&program, &invocation, config, &self.reaper, self.timeout).await?;
        tracing::debug!(pod_id = %pod.container_id, plugin = kind, command, elapsed_ms = started.elapsed().as_millis() as u64, "CNI plugin ran");
        Ok(out)
    }
}

/// One plugin's stdin: its own configuration with the list's name and
/// version, the previous result, and the runtime config it has capabilities for.
fn plugin_config(
    list: &NetworkList,
    plugin: &Map<String, Value>,
    prev: Option<&Value>,
    runtime: &Map<String, Value>,
) -> Value {
    let mut config = plugin.clone();
    config.insert("name".into(), Value::from(list.name.clone()));
    config.insert("cniVersion".into(), Value::from(list.cni_version.clone()));
    if let Some(prev) = prev {
        config.insert("prevResult".into(), prev.clone());
    }
    let wanted: Map<String, Value> = plugin
        .get("capabilities")
        .and_then(Value::as_object)
        .map(|caps| {
            caps.iter()
                .filter(|(_, on)| on.as_bool() == Some(true))
                .filter_map(|(name, _)| runtime.get(name).map(|v| (name.clone(), v.clone())))
                .collect()
        })
        .unwrap_or_default();
    if !wanted.is_empty() {
        config.insert("runtimeConfig".into(), Value::Object(wanted));
    }
    Value::Object(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugins_get_name_version_prev_result_and_only_their_capabilities() {
        let list = NetworkList::parse(
            std::path::Path::new("x.conflist"),
            br#"{"cniVersion":"1.0.0","name":"pods","plugins":[
                {"type":"bridge","bridge":"cni0"},
                {"type":"portmap","capabilities":{"portMappings":true,"bandwidth":false}}]}"#,
        )
        .unwrap();
        let runtime: Map<String, Value> = serde_json::from_str(
            r#"{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}],"bandwidth":{"ingressRate":1}}"#,
        )
        .unwrap();
        let prev = serde_json::json!({"ips":[{"address":"10.0.0.2/24"}]});
        let bridge = plugin_config(&list, &list.plugins[0], None, &runtime);
        assert_eq!(bridge["name"], "pods");
        assert_eq!(bridge["cniVersion"], "1.0.0");
        assert!(bridge.get("runtimeConfig").is_none() && bridge.get("prevResult").is_none());
        let portmap = plugin_config(&list, &list.plugins[1], Some(&prev), &runtime);
        assert_eq!(portmap["prevResult"], prev);
        assert_eq!(portmap["runtimeConfig"]["portMappings"][0]["hostPort"], 8080);
        assert!(portmap["runtimeConfig"].get("bandwidth").is_none());
    }
}
