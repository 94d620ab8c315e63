//! What the error stream of a remotecommand session carries: from v4 on a
//! Kubernetes `metav1.Status` JSON (Success; Failure with reason
//! NonZeroExitCode and an ExitCode cause; Failure for an error), before v4
//! the error's text alone (nothing on success).

use serde_json::json;

/// How a command's session ended.
pub(crate) enum Outcome {
    Exited(i32),
    Failed(String),
}

/// The bytes to write on the error stream (possibly none) for `outcome`.
pub(crate) fn error_stream_bytes(outcome: &Outcome, argv: &[String], status_json: bool) -> Vec<u8> {
    let message = match outcome {
        Outcome::Exited(0) => None,
        Outcome::Exited(code) => Some(format!(
            "command terminated with non-zero exit code: error executing command {}, exit code {code}",
            command_text(argv)
        )),
        Outcome::Failed(why) => Some(why.clone()),
    };
    if !status_json {
        return message.map(String::into_bytes).unwrap_or_default();
    }
    let status = match (outcome, message) {
        (_, None) => json!({"metadata": {}, "status": "Success"}),
        (Outcome::Exited(code), Some(message)) => json!({
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
        }),
        (Outcome::Failed(_), Some(message)) => json!({
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": "InternalError",
            "details": {"causes": [{"message": message}]},
            "code": 500,
        }),
    };
    status.to_string().into_bytes()
}

/// `[sh -c exit 3]`, as Kubernetes prints a command.
fn command_text(argv: &[String]) -> String {
    format!("[{}]", argv.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_become_statuses() {
        let argv = vec!["sh".to_string(), "-c".into(), "exit 3".into()];
        let ok: serde_json::Value =
            serde_json::from_slice(&error_stream_bytes(&Outcome::Exited(0), &argv, true)).unwrap();
        assert_eq!(ok["status"], "Success");
        let bad: serde_json::Value =
            serde_json::from_slice(&error_stream_bytes(&Outcome::Exited(3), &argv, true)).unwrap();
        assert_eq!(bad["reason"], "NonZeroExitCode");
        assert_eq!(bad["details"]["causes"][0]["reason"], "ExitCode");
        assert_eq!(bad["details"]["causes"][0]["message"], "3");
        assert!(error_stream_bytes(&Outcome::Exited(0), &argv, false).is_empty());
    }
}
