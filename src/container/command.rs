//! The process a container runs, merged from the CRI config and the image
//! config exactly as kubelet expects: command/args against the image's
//! Entrypoint/Cmd, environment, and working directory.

use crate::monitor::plan::DEFAULT_PATH;

/// Kubernetes' rules: a command replaces the Entrypoint and drops the Cmd;
/// args alone replace the Cmd and keep the Entrypoint.
pub(crate) fn argv(command: &[String], args: &[String], entrypoint: &[String], cmd: &[String]) -> Vec<String> {
    match (command.is_empty(), args.is_empty()) {
        (false, false) => command.iter().chain(args).cloned().collect(),
        (false, true) => command.to_vec(),
        (true, false) => entrypoint.iter().chain(args).cloned().collect(),
        (true, true) => entrypoint.iter().chain(cmd).cloned().collect(),
    }
}

/// The process environment, as containerd and runc make it: a default PATH
/// and the pod's HOSTNAME, overlaid by the image's environment, overlaid by
/// the config's (same key: the later wins, in the earlier's position); then
/// HOME, the user's, when none of them set it.
pub(crate) fn env(hostname: &str, home: &str, image_env: &[String], config_env: &[(String, String)]) -> Vec<String> {
    let mut out: Vec<(String, String)> =
        vec![("PATH".into(), DEFAULT_PATH.into()), ("HOSTNAME".into(), hostname.into())];
    let mut set = |key: &str, value: &str| match out.iter_mut().find(|(k, _)| k == key) {
        Some(entry) => entry.1 = value.to_string(),
        None => out.push((key.to_string(), value.to_string())),
    };
    for item in image_env {
        let (k, v) = item.split_once('=').unwrap_or((item.as_str(), ""));
        set(k, v);
    }
    for (k, v) in config_env {
        set(k, v);
    }
    if !out.iter().any(|(k, _)| k == "HOME") {
        out.push(("HOME".into(), home.into()));
    }
    out.into_iter().map(|(k, v)| format!("{k}={v}")).collect()
}

/// The config's working dir, else the image's, else `/`.
pub(crate) fn working_dir(config: &str, image: &str) -> String {
    [config, image].into_iter().find(|d| !d.is_empty()).unwrap_or("/").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn kubernetes_command_and_args_rules() {
        let (ep, cmd) = (v(&["/ep"]), v(&["img-cmd"]));
        assert_eq!(argv(&[], &[], &ep, &cmd), v(&["/ep", "img-cmd"]));
        assert_eq!(argv(&v(&["/bin/x"]), &[], &ep, &cmd), v(&["/bin/x"]));
        assert_eq!(argv(&[], &v(&["a", "b"]), &ep, &cmd), v(&["/ep", "a", "b"]));
        assert_eq!(argv(&v(&["/bin/x"]), &v(&["a"]), &ep, &cmd), v(&["/bin/x", "a"]));
        assert_eq!(argv(&[], &[], &[], &v(&["sh"])), v(&["sh"]));
        assert!(argv(&[], &[], &[], &[]).is_empty());
    }

    #[test]
    fn config_env_overlays_image_env_which_overlays_the_defaults() {
        let image = v(&["A=1", "PATH=/bin", "B=2"]);
        let config = vec![("B".to_string(), "x".to_string()), ("C".to_string(), "3".to_string())];
        assert_eq!(
            env("web-0", "/root", &image, &config),
            v(&["PATH=/bin", "HOSTNAME=web-0", "A=1", "B=x", "C=3", "HOME=/root"])
        );
        assert_eq!(
            env("web-0", "/", &[], &[]),
            vec![format!("PATH={DEFAULT_PATH}"), "HOSTNAME=web-0".into(), "HOME=/".into()]
        );
        // The image and the config may set HOSTNAME and HOME themselves.
        let config = vec![("HOSTNAME".to_string(), "mine".to_string()), ("HOME".to_string(), "/data".to_string())];
        assert_eq!(
            env("web-0", "/root", &v(&["HOME=/img"]), &config),
            v(&[&format!("PATH={DEFAULT_PATH}"), "HOSTNAME=mine", "HOME=/data"])
        );
    }

    #[test]
    fn working_dir_falls_back() {
        assert_eq!(working_dir("/app", "/img"), "/app");
        assert_eq!(working_dir("", "/img"), "/img");
        assert_eq!(working_dir("", ""), "/");
    }
}
