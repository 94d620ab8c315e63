//! Image volumes (KEP-4639) through the socket: an image mounted read-only,
//! whole or one of its paths, as its layers show it (whiteouts and opaque
//! directories included); what is refused; the image kept and unremovable
//! while mounted; several pods sharing it; a daemon restart; a user namespace.

mod common;

use common::client::container_config;
use common::{images, TestEnv, Up};
use nidus::api::*;

fn image_volume(path: &str, image: &str, sub_path: &str) -> Mount {
    Mount {
        container_path: path.into(),
        readonly: true,
        image: Some(ImageSpec { image: image.into(), ..Default::default() }),
        image_sub_path: sub_path.into(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_volume_shows_the_image_read_only_and_keeps_it() {
    let mut env = TestEnv::new("imagevol");
    let mut cri = env.start().await;
    let busybox = env.import_busybox(&mut cri).await;
    let data = env.import_image(&mut cri, images::volume_data()).await;
    let single = env.import_image(&mut cri, images::volume_single()).await;
    let data_id = images::volume_data().id.clone();
    let pod = env.pod("vol");
    let pod_id = cri.run_pod(pod.clone()).await.unwrap();
    let mut config = container_config("app", &busybox, &["sleep", "1000"]);
    config.mounts = vec![
        image_volume("/whole", &data, ""),
        image_volume("/sub", &data_id, "data"),
        image_volume("/file", &data, "data/b"),
        image_volume("/tools", &busybox, ""),
        image_volume("/single", &single, ""),
    ];
    let app = cri.run_container(&pod_id, &pod, config).await;
    // The merged image: the lower's file, the upper's, no whited-out dir, the opaque dir's own file only.
    let listing = cri.exec_ok(&app, &["sh", "-c", "ls /whole/data; ls /whole/keep/opaque; cat /whole/data/a"]).await;
    assert_eq!(listing, "a\nb\nnew\nfrom the lower layer\n", "{listing}");
    assert_eq!(cri.exec_ok(&app, &["ls", "/sub"]).await, "a\nb\n", "the sub path, not the image's root");
    assert_eq!(cri.exec_ok(&app, &["cat", "/file"]).await, "from the upper layer\n");
    assert_eq!(cri.exec_ok(&app, &["cat", "/single/only/one"]).await, "one\n", "a one-layer image");
    // Read-only, and binaries in it run.
    for path in ["/whole/new", "/sub/new", "/single/new"] {
        let out = cri.exec(&app, &["touch", path], 10).await.unwrap();
        assert_ne!(out.exit_code, 0, "{path} is writable");
        assert!(String::from_utf8_lossy(&out.stderr).contains("Read-only file system"), "{out:?}");
    }
    assert_eq!(cri.exec_ok(&app, &["/tools/bin/busybox", "echo", "ran"]).await, "ran\n");
    // Status names each image by its id.
    let status = cri.status_of(&app).await;
    let by_path = |path: &str| status.mounts.iter().find(|m| m.container_path == path).unwrap().clone();
    assert_eq!(by_path("/whole").image.unwrap().image_ref, data_id);
    assert_eq!(by_path("/sub").image.unwrap().image_ref, data_id);

    // The image stays while mounted, shared by a second pod without a copy.
    let err = cri.remove_image(&data).await.expect_err("removing a mounted image");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains(&app), "names the container: {err:?}");
    let other_pod = env.pod("other");
    let other_id = cri.run_pod(other_pod.clone()).await.unwrap();
    let mut other = container_config("other", &busybox, &["sleep", "1000"]);
    other.mounts = vec![image_volume("/whole", &data, "")];
    let other = cri.run_container(&other_id, &other_pod, other).await;
    let inode = |out: String| out.split_whitespace().next().unwrap().to_string();
    let first = inode(cri.exec_ok(&app, &["ls", "-i", "/whole/data/a"]).await);
    let second = inode(cri.exec_ok(&other, &["ls", "-i", "/whole/data/a"]).await);
    assert_eq!(first, second, "the same file");

    // A restarted daemon finds the mounts as they were.
    env.kill_daemon();
    let mut cri = env.start().await;
    assert_eq!(cri.exec_ok(&app, &["cat", "/whole/data/b"]).await, "from the upper layer\n");
    // Gone with its containers, the image can be removed.
    for (pod, container) in [(&pod_id, &app), (&other_id, &other)] {
        cri.stop_container(container, 0).await.unwrap();
        cri.remove_container(container).await.unwrap();
        cri.stop_pod(pod).await.unwrap();
        cri.remove_pod(pod).await.unwrap();
    }
    cri.remove_image(&data).await.expect("the image once no container mounts it");
    env.assert_no_leftovers();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_an_image_volume_cannot_be_is_refused_and_leaves_nothing() {
    let Up { env, mut cri, image: busybox, pod, pod_id } = TestEnv::new("imagevolbad").up("bad").await;
    let data = env.import_image(&mut cri, images::volume_data()).await;
    let cases: Vec<(&str, Mount, tonic::Code, &str)> = vec![
        ("missing sub path", image_volume("/v", &data, "not-existing"), tonic::Code::InvalidArgument, "does not exist"),
        ("whited out", image_volume("/v", &data, "data/gone"), tonic::Code::InvalidArgument, "does not exist"),
        (
            "under an opaque dir",
            image_volume("/v", &data, "keep/opaque/old"),
            tonic::Code::InvalidArgument,
            "does not exist",
        ),
        ("through a link", image_volume("/v", &data, "link/passwd"), tonic::Code::InvalidArgument, "symbolic link"),
        ("a link", image_volume("/v", &data, "link"), tonic::Code::InvalidArgument, "symbolic link"),
        ("a device", image_volume("/v", &data, "node"), tonic::Code::InvalidArgument, "neither"),
        ("..", image_volume("/v", &data, "data/../.."), tonic::Code::InvalidArgument, "plain names"),
        ("absolute", image_volume("/v", &data, "/etc"), tonic::Code::InvalidArgument, "plain names"),
        (
            "read-write",
            Mount { readonly: false, ..image_volume("/v", &data, "") },
            tonic::Code::InvalidArgument,
            "readonly",
        ),
        (
            "no such image",
            image_volume("/v", "docker.io/library/nothing:here", ""),
            tonic::Code::NotFound,
            "pull it first",
        ),
    ];
    for (what, mount, code, says) in cases {
        let mut config = container_config("c", &busybox, &["true"]);
        config.mounts = vec![mount];
        let err = cri.create_container(&pod_id, &pod, config).await.expect_err(what);
        assert_eq!(err.code(), code, "{what}: {err:?}");
        assert!(err.message().contains("config.mounts[0]") && err.message().contains(says), "{what}: {err:?}");
    }
    // Nothing was left holding the image.
    assert!(cri.list_containers(None).await.is_empty());
    cri.remove_image(&data).await.expect("no refused container keeps the image");
    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_volume_in_a_user_namespaced_pod_is_its_roots() {
    let env = TestEnv::new("imagevoluserns");
    let mut pod = env.pod("mapped");
    let ids = vec![IdMapping { host_id: 1_500_000, container_id: 0, length: 65536 }];
    pod.linux.as_mut().unwrap().security_context.as_mut().unwrap().namespace_options.as_mut().unwrap().userns_options =
        Some(UserNamespace { mode: NamespaceMode::Pod as i32, uids: ids.clone(), gids: ids });
    let Up { env, mut cri, image: busybox, pod, pod_id } = env.up_with(pod).await;
    let data = env.import_image(&mut cri, images::volume_data()).await;
    let mut config = container_config("app", &busybox, &["sleep", "1000"]);
    config.mounts = vec![image_volume("/whole", &data, ""), image_volume("/sub", &data, "data")];
    let app = cri.run_container(&pod_id, &pod, config).await;
    assert_eq!(cri.exec_ok(&app, &["stat", "-c", "%u:%g", "/whole/data/a", "/sub/b"]).await, "0:0\n0:0\n");
    cri.stop_pod(&pod_id).await.unwrap();
    cri.remove_pod(&pod_id).await.unwrap();
    env.assert_no_leftovers();
}
