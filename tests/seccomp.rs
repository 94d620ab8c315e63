//! Seccomp through the socket: Localhost OCI profiles (ERRNO with its errno,
//! KILL_PROCESS, argument rules with SCMP_CMP_*), both ways of installing a
//! filter (with and without no_new_privs), RuntimeDefault against
//! Unconfined, the legacy profile strings and pod-level settings, ExecSync
//! under the container's profile, profile errors that leave nothing behind,
//! privileged = unconfined, and one compile per distinct profile.

mod common;

use common::client::{container_config, security};
use common::probe::{expect_errno, expect_ok, probe, profile, profile_file, status_field, with_seccomp};
use common::{images, TestEnv};
use nidus::api::security_profile::ProfileType;
use nidus::api::*;

const EPERM: i32 = 1;
const EINVAL: i32 = 22;
const ENOSYS: i32 = 38;
/// The errno the test profiles answer with (EDQUOT: nothing else returns it here).
const PROFILE_ERRNO: i32 = 122;
const SIGSYS: i32 = 31;

fn deny_mkdir(action: &str) -> String {
    format!(
        r#"{{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_X86_64"],
            "syscalls":[{{"names":["mkdir","mkdirat"],"action":"{action}","errnoRet":{PROFILE_ERRNO}}}]}}"#
    )
}

/// personality only with 0; unshare of a user namespace refused (MASKED_EQ).
const ARGUMENT_RULES: &str = r#"{
  "defaultAction": "SCMP_ACT_ALLOW",
  "syscalls": [
    {"names": ["personality"], "action": "SCMP_ACT_ERRNO", "errnoRet": 122,
     "args": [{"index": 0, "value": 0, "op": "SCMP_CMP_NE"}]},
    {"names": ["unshare"], "action": "SCMP_ACT_ERRNO", "errnoRet": 95,
     "args": [{"index": 0, "value": 268435456, "valueTwo": 268435456, "op": "SCMP_CMP_MASKED_EQ"}]},
    {"names": ["no_such_syscall"], "action": "SCMP_ACT_ERRNO"}
  ]
}"#;

fn sleeper(name: &str, image: &str) -> ContainerConfig {
    container_config(name, image, &["sleep", "3600"])
}

#[tokio::test]
async fn localhost_profiles_deny_with_their_errno_kill_and_match_arguments() {
    let mut env = TestEnv::new("seclocal");
    let mut cri = env.start().await;
    let image = env.import_image(&mut cri, images::busybox_probe()).await;
    let dir = env.base.join("profiles");
    let errno_profile = profile_file(&dir, "deny-mkdir.json", &deny_mkdir("SCMP_ACT_ERRNO"));
    let kill_profile = profile_file(&dir, "kill-mkdir.json", &deny_mkdir("SCMP_ACT_KILL_PROCESS"));
    let args_profile = profile_file(&dir, "arguments.json", ARGUMENT_RULES);
    let pod = env.pod("local");
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    let errno_ref = errno_profile.to_str().unwrap();

    // The container's own process runs under the profile...
    let script = "mkdir /tmp/a; echo rc=$?; ls / >/dev/null && echo listed";
    let own = with_seccomp(container_config("own", &image, &["sh", "-c", script]), ProfileType::Localhost, errno_ref);
    let own = cri.run_container(&pod_id, &pod, own).await;
    assert_eq!(cri.wait_exited(&own, 20).await.exit_code, 0);
    let out = common::client::log_lines(&cri.logs(&own).await, "stdout");
    assert_eq!(out, vec!["rc=1", "listed"]);
    let err = common::client::log_lines(&cri.logs(&own).await, "stderr").join("\n");
    assert!(err.contains("Disk quota exceeded"), "mkdir fails with the profile's errno: {err}");

    // ...and so does ExecSync.
    let errno_c = cri
        .run_container(&pod_id, &pod, with_seccomp(sleeper("errno", &image), ProfileType::Localhost, errno_ref))
        .await;
    expect_errno(&mut cri, &errno_c, &["mkdir", "/tmp/x"], PROFILE_ERRNO).await;
    let out = cri.exec(&errno_c, &["mkdir", "/tmp/y"], 10).await.unwrap();
    assert_eq!(out.exit_code, 1);
    assert!(String::from_utf8_lossy(&out.stderr).contains("Disk quota exceeded"));
    assert_eq!(cri.exec_ok(&errno_c, &["sh", "-c", "echo hi | wc -c"]).await.trim(), "3", "other commands work");
    let info = cri.container_info(&errno_c).await;
    let seccomp = &info["security"]["seccomp"];
    assert_eq!(seccomp["profile"], "Localhost");
    assert_eq!(seccomp["localhostRef"], errno_ref);
    assert_eq!(seccomp["source"], "config.linux.security_context.seccomp");
    assert_eq!(seccomp["program"]["filters"], 1, "{seccomp}");
    assert_eq!(info["runtimeSpec"]["linux"]["seccomp"]["syscalls"][0]["errnoRet"], PROFILE_ERRNO);

    // KILL_PROCESS: the process dies of SIGSYS, as PID 1 and under ExecSync.
    let kill_ref = kill_profile.to_str().unwrap();
    let killed =
        with_seccomp(container_config("killed", &image, &["mkdir", "/tmp/k"]), ProfileType::Localhost, kill_ref);
    let killed = cri.run_container(&pod_id, &pod, killed).await;
    let status = cri.wait_exited(&killed, 20).await;
    assert_eq!(status.exit_code, 128 + SIGSYS, "{status:?}");
    assert_eq!(status.reason, "Error");
    let kill_c =
        cri.run_container(&pod_id, &pod, with_seccomp(sleeper("kill", &image), ProfileType::Localhost, kill_ref)).await;
    let out = cri.exec(&kill_c, &["mkdir", "/tmp/k"], 10).await.unwrap();
    assert_eq!(out.exit_code, 128 + SIGSYS);
    assert_eq!(cri.exec_ok(&kill_c, &["echo", "alive"]).await, "alive\n");

    // Argument rules: NE and MASKED_EQ; an unknown name is skipped.
    let args_c = cri
        .run_container(
            &pod_id,
            &pod,
            with_seccomp(sleeper("args", &image), ProfileType::Localhost, args_profile.to_str().unwrap()),
        )
        .await;
    expect_ok(&mut cri, &args_c, &["personality", "0"]).await;
    expect_errno(&mut cri, &args_c, &["personality", "8"], PROFILE_ERRNO).await;
    expect_errno(&mut cri, &args_c, &["personality", "0xffffffff"], PROFILE_ERRNO).await;
    expect_errno(&mut cri, &args_c, &["unshare-user"], 95).await;
    // A mount namespace is not matched by the mask: the kernel refuses it (no CAP_SYS_ADMIN).
    expect_errno(&mut cri, &args_c, &["unshare-mount"], EPERM).await;
    let skipped = &cri.container_info(&args_c).await["security"]["seccomp"]["program"]["skippedSyscalls"];
    assert_eq!(skipped, &serde_json::json!(["no_such_syscall"]));

    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}

#[tokio::test]
async fn the_filter_goes_in_with_and_without_no_new_privs_and_capabilities_still_drop() {
    let mut env = TestEnv::new("secnnp");
    let mut cri = env.start().await;
    let image = env.import_image(&mut cri, images::busybox_probe()).await;
    let dir = env.base.join("profiles");
    let path = profile_file(&dir, "deny-mkdir.json", &deny_mkdir("SCMP_ACT_ERRNO"));
    let pod = env.pod("nnp");
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();

    // (name, run as, no_new_privs)
    for (name, uid, no_new_privs) in [
        ("user-escalation", Some(1000), false),
        ("user-nnp", Some(1000), true),
        ("root-escalation", None, false),
        ("root-nnp", None, true),
    ] {
        let mut config = with_seccomp(sleeper(name, &image), ProfileType::Localhost, path.to_str().unwrap());
        let sc = security(&mut config);
        sc.no_new_privs = no_new_privs;
        sc.run_as_user = uid.map(|value| Int64Value { value });
        let id = cri.run_container(&pod_id, &pod, config).await;
        expect_errno(&mut cri, &id, &["mkdir", "/tmp/x"], PROFILE_ERRNO).await;
        assert_eq!(status_field(&mut cri, &id, "NoNewPrivs").await, if no_new_privs { "1" } else { "0" }, "{name}");
        assert_eq!(status_field(&mut cri, &id, "Seccomp").await, "2", "{name}: filter mode");
        let cap_eff = status_field(&mut cri, &id, "CapEff").await;
        let cap_bnd = status_field(&mut cri, &id, "CapBnd").await;
        if uid.is_some() {
            // The CAP_SYS_ADMIN kept to install the filter is gone: nothing effective.
            assert_eq!(cap_eff, "0000000000000000", "{name}");
        } else {
            assert_eq!(cap_eff, "00000000a80425fb", "{name}: the default set, no CAP_SYS_ADMIN");
        }
        assert_eq!(cap_bnd, "00000000a80425fb", "{name}");
        // The container's own init went through the same path: its status shows the filter.
        let init = cri.exec_ok(&id, &["cat", "/proc/1/status"]).await;
        assert!(init.contains("Seccomp:\t2"), "{name}: {init}");
        assert!(init.lines().any(|l| l == "CapEff:\t0000000000000000" || l == "CapEff:\t00000000a80425fb"), "{name}");
    }

    // Without no_new_privs the runtime's own capset comes after the filter: a
    // profile refusing capset refuses the start. With no_new_privs it does not.
    let no_capset = profile_file(
        &dir,
        "no-capset.json",
        r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["capset"],"action":"SCMP_ACT_ERRNO"}]}"#,
    );
    for (name, no_new_privs) in [("capset-escalation", false), ("capset-nnp", true)] {
        let mut config = with_seccomp(sleeper(name, &image), ProfileType::Localhost, no_capset.to_str().unwrap());
        let sc = security(&mut config);
        sc.no_new_privs = no_new_privs;
        sc.run_as_user = Some(Int64Value { value: 1000 });
        let id = cri.create_container(&pod_id, &pod, config).await.unwrap();
        let started = cri.start_container(&id).await;
        if no_new_privs {
            started.unwrap();
            assert_eq!(cri.status_of(&id).await.state(), ContainerState::ContainerRunning);
        } else {
            let e = started.unwrap_err();
            assert!(e.message().contains("setting capabilities after the seccomp filter"), "{}", e.message());
            assert_eq!(cri.status_of(&id).await.reason, "StartError");
        }
    }
    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}

#[tokio::test]
async fn runtime_default_refuses_what_containerd_refuses_and_runs_ordinary_workloads() {
    let mut env = TestEnv::new("secdefault");
    let mut cri = env.start().await;
    let image = env.import_image(&mut cri, images::busybox_probe()).await;
    let pod = env.pod("default");
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    let confined = cri
        .run_container(&pod_id, &pod, with_seccomp(sleeper("confined", &image), ProfileType::RuntimeDefault, ""))
        .await;
    let free =
        cri.run_container(&pod_id, &pod, with_seccomp(sleeper("free", &image), ProfileType::Unconfined, "")).await;

    let modules = std::path::Path::new("/proc/modules").exists();
    if !modules {
        eprintln!("note: this kernel has no module support; init_module answers ENOSYS when not filtered");
    }
    // (probe, errno under RuntimeDefault, what the same call does unconfined)
    let cases: &[(&[&str], i32, Option<i32>)] = &[
        (&["unshare-user"], EPERM, None),
        (&["clone-newuser"], EPERM, None),
        (&["clone3"], ENOSYS, None),
        (&["keyctl"], EPERM, None),
        (&["ptrace-child"], EPERM, None),
        (&["personality", "0x0040000"], EPERM, None),
        (&["clock-settime"], EPERM, Some(EINVAL)),
        // Without CAP_SYS_BOOT the kernel refuses it too; the filter answers first.
        (&["reboot"], EPERM, Some(EPERM)),
        // Unconfined: EPERM without CAP_SYS_MODULE, or ENOSYS on a kernel
        // without module support (this machine's: no /proc/modules).
        (&["init-module"], EPERM, Some(if modules { EPERM } else { ENOSYS })),
        (&["mount-tmpfs", "/tmp"], EPERM, Some(EPERM)),
    ];
    for (args, confined_errno, unconfined) in cases {
        expect_errno(&mut cri, &confined, args, *confined_errno).await;
        let p = probe(&mut cri, &free, args).await;
        match unconfined {
            None => assert!(p.ok(), "unconfined {args:?} works: {p:?}"),
            Some(errno) => assert_eq!(p.errno(), Some(*errno), "unconfined {args:?}: {p:?}"),
        }
    }
    expect_ok(&mut cri, &confined, &["personality", "0"]).await;
    expect_ok(&mut cri, &confined, &["personality", "0xffffffff"]).await;

    // Ordinary workloads: the shell, coreutils-style applets, a dynamic binary, pipes, fork/exec.
    let out = cri
        .exec_ok(
            &confined,
            &[
                "sh",
                "-c",
                "cat /etc/passwd | grep -c root; ls /bin | wc -l; date +%Y >/dev/null && echo dated; sleep 0.1; id -u",
            ],
        )
        .await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "1");
    assert!(lines[1].parse::<u32>().unwrap() > 20);
    assert_eq!(&lines[2..], ["dated", "0"]);
    let ldd_free = cri.exec_ok(&confined, &["/bin/busybox", "true"]).await;
    assert_eq!(ldd_free, "");
    assert_eq!(
        cri.exec_ok(&confined, &["sh", "-c", "echo x > /tmp/f && mkdir /tmp/d && mv /tmp/f /tmp/d/ && ls /tmp/d"])
            .await,
        "f\n"
    );

    let info = cri.container_info(&confined).await;
    assert_eq!(info["security"]["seccomp"]["profile"], "RuntimeDefault");
    assert_eq!(info["runtimeSpec"]["linux"]["seccomp"]["defaultAction"], "SCMP_ACT_ERRNO");
    assert_eq!(cri.container_info(&free).await["security"]["seccomp"]["profile"], "Unconfined");
    assert!(cri.container_info(&free).await["runtimeSpec"]["linux"]["seccomp"].is_null());

    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}

#[tokio::test]
async fn legacy_strings_pod_settings_privileged_and_one_compile_per_profile() {
    let mut env = TestEnv::new("secsources");
    let mut cri = env.start().await;
    let image = env.import_image(&mut cri, images::busybox_probe()).await;
    let dir = env.base.join("profiles");
    let path = profile_file(&dir, "deny-mkdir.json", &deny_mkdir("SCMP_ACT_ERRNO"));
    let mut pod = env.pod("sources");
    pod.linux.as_mut().unwrap().security_context.as_mut().unwrap().seccomp =
        Some(profile(ProfileType::RuntimeDefault, ""));
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();

    // Nothing on the container: the pod's RuntimeDefault.
    let inherits = cri.run_container(&pod_id, &pod, sleeper("inherits", &image)).await;
    expect_errno(&mut cri, &inherits, &["clone3"], ENOSYS).await;
    assert_eq!(
        cri.container_info(&inherits).await["security"]["seccomp"]["source"],
        "the pod's linux.security_context.seccomp"
    );
    // The legacy strings.
    let mut legacy = sleeper("legacy", &image);
    security(&mut legacy).seccomp_profile_path = format!("localhost/{}", path.display());
    let legacy = cri.run_container(&pod_id, &pod, legacy).await;
    expect_errno(&mut cri, &legacy, &["mkdir", "/tmp/x"], PROFILE_ERRNO).await;
    expect_ok(&mut cri, &legacy, &["clone3"]).await;
    let mut unconfined = sleeper("legacy-unconfined", &image);
    security(&mut unconfined).seccomp_profile_path = "unconfined".into();
    let unconfined = cri.run_container(&pod_id, &pod, unconfined).await;
    expect_ok(&mut cri, &unconfined, &["clone3"]).await;
    // A v1alpha2-era kubelet sends both: the structured field wins.
    let mut both = with_seccomp(sleeper("both", &image), ProfileType::Localhost, path.to_str().unwrap());
    security(&mut both).seccomp_profile_path = "docker/default".into();
    let both = cri.run_container(&pod_id, &pod, both).await;
    expect_errno(&mut cri, &both, &["mkdir", "/tmp/x"], PROFILE_ERRNO).await;
    expect_ok(&mut cri, &both, &["clone3"]).await;

    // Privileged containers run unconfined whatever they ask for (Kubernetes).
    let mut privileged = with_seccomp(sleeper("privileged", &image), ProfileType::RuntimeDefault, "");
    security(&mut privileged).privileged = true;
    let privileged = cri.run_container(&pod_id, &pod, privileged).await;
    expect_ok(&mut cri, &privileged, &["clone3"]).await;
    let seccomp = cri.container_info(&privileged).await["security"]["seccomp"].clone();
    assert_eq!(seccomp["profile"], "Unconfined");
    assert_eq!(seccomp["source"], "config.linux.security_context.privileged");

    // SELinux options are accepted and reported, not enforced; AppArmor's
    // RuntimeDefault is enforced where the node runs AppArmor (tests/apparmor.rs).
    let apparmor_here =
        std::fs::read_to_string("/sys/module/apparmor/parameters/enabled").is_ok_and(|s| s.trim() == "Y");
    let mut lsm = sleeper("lsm", &image);
    let sc = security(&mut lsm);
    sc.apparmor = Some(profile(ProfileType::RuntimeDefault, ""));
    sc.apparmor_profile = "unconfined".into();
    sc.selinux_options = Some(SeLinuxOption {
        user: "system_u".into(),
        role: "system_r".into(),
        r#type: "container_t".into(),
        level: "s0:c1,c2".into(),
    });
    let lsm = cri.run_container(&pod_id, &pod, lsm).await;
    let report = cri.container_info(&lsm).await["security"].clone();
    assert_eq!(report["apparmor"]["requested"], "runtime/default", "the structured field wins");
    assert_eq!(report["apparmor"]["enforced"], apparmor_here);
    assert_eq!(report["selinux"]["requested"], "system_u:system_r:container_t:s0:c1,c2");
    assert_eq!(report["selinux"]["enforced"], false);
    assert_eq!(report["apparmor"]["hostHasModule"], apparmor_here);
    assert_eq!(report["selinux"]["hostHasModule"], std::path::Path::new("/sys/fs/selinux/enforce").exists());

    // Ten containers with the same profile and capabilities: compiled once.
    let before = cri_seccomp_stats(&mut cri).await;
    for i in 0..10 {
        let id = cri.create_container(&pod_id, &pod, sleeper(&format!("many-{i}"), &image)).await.unwrap();
        assert_eq!(cri.container_info(&id).await["security"]["seccomp"]["profile"], "RuntimeDefault");
    }
    let after = cri_seccomp_stats(&mut cri).await;
    assert_eq!(
        after["compiled"], before["compiled"],
        "RuntimeDefault for the default capabilities was compiled already"
    );
    assert_eq!(after["hits"].as_u64().unwrap() - before["hits"].as_u64().unwrap(), 10);

    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}

async fn cri_seccomp_stats(cri: &mut common::Cri) -> serde_json::Value {
    let status = cri.runtime.status(StatusRequest { verbose: true }).await.unwrap().into_inner();
    let info: serde_json::Value = serde_json::from_str(&status.info["config"]).unwrap();
    info["seccompPrograms"].clone()
}

#[tokio::test]
async fn bad_profiles_fail_create_container_and_leave_nothing() {
    let mut env = TestEnv::new("secerrors");
    let mut cri = env.start().await;
    let image = env.import_image(&mut cri, images::busybox_probe()).await;
    let dir = env.base.join("profiles");
    let malformed =
        profile_file(&dir, "malformed.json", "{\"defaultAction\": \"SCMP_ACT_ALLOW\",\n  \"syscalls\": [ oops ]}");
    let notify = profile_file(
        &dir,
        "notify.json",
        r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_NOTIFY"}]}"#,
    );
    let missing = dir.join("does-not-exist.json");
    let pod = env.pod("errors");
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();

    let create = |name: &str, kind, reference: &str| with_seccomp(sleeper(name, &image), kind, reference);
    let e = cri
        .create_container(&pod_id, &pod, create("missing", ProfileType::Localhost, missing.to_str().unwrap()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
    assert!(e.message().contains(missing.to_str().unwrap()), "names the path: {}", e.message());

    let e = cri
        .create_container(&pod_id, &pod, create("malformed", ProfileType::Localhost, malformed.to_str().unwrap()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().contains("malformed.json")
            && e.message().contains("malformed JSON")
            && e.message().contains("line 2"),
        "{}",
        e.message()
    );

    let e = cri
        .create_container(&pod_id, &pod, create("notify", ProfileType::Localhost, notify.to_str().unwrap()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("notify.json") && e.message().contains("SCMP_ACT_NOTIFY"), "{}", e.message());

    let e = cri
        .create_container(&pod_id, &pod, create("relative", ProfileType::Localhost, "profiles/x.json"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("config.linux.security_context.seccomp.localhost_ref"), "{}", e.message());
    let e = cri
        .create_container(&pod_id, &pod, create("misplaced-ref", ProfileType::RuntimeDefault, "/x.json"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);

    // Nothing half-made: no container, no directory, and the names are free again.
    assert!(cri.list_containers(None).await.is_empty());
    assert!(env.leftover_sandbox_dirs().iter().all(|d| !d.starts_with(env.root.join("containers"))));
    std::fs::write(&missing, deny_mkdir("SCMP_ACT_ERRNO")).unwrap();
    let fixed =
        cri.run_container(&pod_id, &pod, create("missing", ProfileType::Localhost, missing.to_str().unwrap())).await;
    expect_errno(&mut cri, &fixed, &["mkdir", "/tmp/x"], PROFILE_ERRNO).await;

    // A pod with a bad seccomp setting is refused at RunPodSandbox.
    let mut bad_pod = env.pod("bad-pod");
    bad_pod.linux.as_mut().unwrap().security_context.as_mut().unwrap().seccomp_profile_path =
        "localhost/relative.json".into();
    let e = cri.run_pod(bad_pod).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("seccomp_profile_path"), "{}", e.message());

    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}
