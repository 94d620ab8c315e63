//! proto/api.proto speaks the real CRI runtime.v1 and proto/v1alpha2/api.proto
//! the real runtime.v1alpha2, and every runtime.v1alpha2 message reads and
//! writes the same bytes as its runtime.v1 namesake: the premise of serving
//! both APIs with the runtime.v1 types and code (src/cri/v1alpha2.rs).
//! Checked on the descriptors build.rs compiles (protox), against the wire
//! facts kept beside each proto (proto/wire-facts.tsv, from kubernetes/cri-api;
//! proto/v1alpha2/wire-facts.tsv).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;

use prost::Message;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, FileDescriptorSet};

const V1ALPHA2_FDS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/v1alpha2.fds.bin"));
const V1_FDS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/v1.fds.bin"));

/// Where runtime.v1 gave a v1alpha2 field another type, each with why serving
/// v1alpha2 with the v1 type is still right: (v1alpha2 fact, v1 fact, why).
const KNOWN_DIFFERENCES: &[(&str, &str, &str)] = &[(
    "field\tKeyValue\tvalue\t2\t\tstring",
    "field\tKeyValue\tvalue\t2\t\tbytes",
    "string and bytes share the length-delimited wire type, and a UTF-8 string decodes as bytes; KeyValue \
     (ContainerConfig.envs) only travels from client to nidus (see key_value_only_travels_from_client_to_nidus)",
)];

/// A wire fact in the row format of the facts files, without trailing empty columns.
type Fact = Vec<String>;

fn fact(row: &str) -> Fact {
    let mut columns: Vec<String> = row.split('\t').map(str::to_string).collect();
    while columns.last().is_some_and(|c| c.is_empty()) {
        columns.pop();
    }
    columns
}

fn facts_file(path: &Path) -> BTreeSet<Fact> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).map(fact).collect()
}

fn descriptors(bytes: &[u8]) -> FileDescriptorSet {
    FileDescriptorSet::decode(bytes).expect("build.rs wrote a descriptor set")
}

/// The wire facts of the one file of `package` in a descriptor set.
fn facts_of(set: &FileDescriptorSet, package: &str) -> BTreeSet<Fact> {
    let file = set.file.iter().find(|f| f.package() == package).expect("the package is in the descriptor set");
    let local = |type_name: &str| -> String {
        let name = type_name.trim_start_matches('.');
        name.strip_prefix(package).and_then(|n| n.strip_prefix('.')).unwrap_or(name).to_string()
    };
    let mut facts = BTreeSet::new();
    let mut add = |columns: &[&str]| facts.insert(fact(&columns.join("\t")));
    let mut messages: Vec<(String, &DescriptorProto)> =
        file.message_type.iter().map(|m| (m.name().to_string(), m)).collect();
    while let Some((name, message)) = messages.pop() {
        let map_entry = message.options.as_ref().is_some_and(|o| o.map_entry());
        add(&["message", &name, if map_entry { "map_entry" } else { "" }]);
        for field in &message.field {
            let number = field.number().to_string();
            let repeated = if field.label() == Label::Repeated { "repeated" } else { "" };
            let kind = field.r#type().as_str_name().trim_start_matches("TYPE_").to_lowercase();
            let type_name = local(field.type_name());
            let oneof = field.oneof_index.map(|i| message.oneof_decl[i as usize].name().to_string());
            add(&["field", &name, field.name(), &number, repeated, &kind, &type_name, oneof.as_deref().unwrap_or("")]);
        }
        for e in &message.enum_type {
            let enum_name = format!("{name}.{}", e.name());
            add(&["enum", &enum_name]);
            for v in &e.value {
                add(&["value", &enum_name, v.name(), &v.number().to_string()]);
            }
        }
        messages.extend(message.nested_type.iter().map(|m| (format!("{name}.{}", m.name()), m)));
    }
    for e in &file.enum_type {
        add(&["enum", e.name()]);
        for v in &e.value {
            add(&["value", e.name(), v.name(), &v.number().to_string()]);
        }
    }
    for service in &file.service {
        add(&["service", service.name()]);
        for rpc in &service.method {
            let client_stream = if rpc.client_streaming() { "client_stream" } else { "" };
            let server_stream = if rpc.server_streaming() { "server_stream" } else { "" };
            let (input, output) = (local(rpc.input_type()), local(rpc.output_type()));
            add(&["rpc", service.name(), rpc.name(), &input, &output, client_stream, server_stream]);
        }
    }
    facts
}

fn show(facts: &[&Fact]) -> String {
    facts.iter().map(|f| format!("  {}\n", f.join(" "))).collect()
}

/// Asserts every v1alpha2 fact holds in v1 too, but for the known differences.
fn assert_v1alpha2_within_v1(v1alpha2: &BTreeSet<Fact>, v1: &BTreeSet<Fact>, v1_source: &str) {
    let known: HashMap<Fact, Fact> = KNOWN_DIFFERENCES.iter().map(|(a, b, _)| (fact(a), fact(b))).collect();
    let mut differ = Vec::new();
    for f in v1alpha2 {
        match known.get(f) {
            Some(v1_fact) => assert!(v1.contains(v1_fact), "{v1_source} lacks the known difference {v1_fact:?}"),
            None if !v1.contains(f) => differ.push(f),
            None => {}
        }
    }
    assert!(
        differ.is_empty(),
        "{} runtime.v1alpha2 facts do not hold in {v1_source}; serving them with the runtime.v1 types would be \
         wrong (or needs a reasoned entry in KNOWN_DIFFERENCES):\n{}",
        differ.len(),
        show(&differ)
    );
}

/// Asserts `have` (from a proto) and `want` (from a facts file) are the same facts.
fn assert_same_facts(have: &BTreeSet<Fact>, want: &BTreeSet<Fact>, proto: &str, facts: &str) {
    let missing: Vec<_> = want.difference(have).collect();
    let extra: Vec<_> = have.difference(want).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{proto} differs from {facts}\nmissing:\n{}extra:\n{}",
        show(&missing),
        show(&extra)
    );
}

#[test]
fn v1_proto_states_exactly_the_wire_facts() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let want = facts_file(&repo.join("proto/wire-facts.tsv"));
    let have = facts_of(&descriptors(V1_FDS), "runtime.v1");
    assert_same_facts(&have, &want, "proto/api.proto", "proto/wire-facts.tsv");
    // Kubernetes 1.37's shape, as a reader would check it by hand.
    assert!(want.contains(&fact("field\tKeyValue\tvalue\t2\t\tbytes")));
    assert!(want.contains(&fact("value\tSignal\tSIGNAL_SIGKILL\t13")));
    assert!(want.iter().any(|f| f[0] == "rpc" && f[2] == "CheckpointPod"));
}

#[test]
fn v1alpha2_proto_states_exactly_the_wire_facts() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let want = facts_file(&repo.join("proto/v1alpha2/wire-facts.tsv"));
    let have = facts_of(&descriptors(V1ALPHA2_FDS), "runtime.v1alpha2");
    assert_same_facts(&have, &want, "proto/v1alpha2/api.proto", "proto/v1alpha2/wire-facts.tsv");
    // The two services as kubelet 1.20-1.25 call them: 24 + 5 RPCs, none streaming.
    let rpcs: Vec<_> = have.iter().filter(|f| f[0] == "rpc").collect();
    assert_eq!(rpcs.iter().filter(|f| f[1] == "RuntimeService").count(), 24);
    assert_eq!(rpcs.iter().filter(|f| f[1] == "ImageService").count(), 5);
    assert!(rpcs.iter().all(|f| f.len() == 5), "no v1alpha2 RPC streams: {rpcs:?}");
}

#[test]
fn every_v1alpha2_message_has_the_wire_format_of_its_v1_namesake() {
    let v1alpha2 = facts_of(&descriptors(V1ALPHA2_FDS), "runtime.v1alpha2");
    let v1 = facts_of(&descriptors(V1_FDS), "runtime.v1");
    assert_v1alpha2_within_v1(&v1alpha2, &v1, "proto/api.proto (the Rust types nidus serves with)");
}

#[test]
fn the_v1alpha2_facts_hold_in_upstream_runtime_v1() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let v1alpha2 = facts_file(&repo.join("proto/v1alpha2/wire-facts.tsv"));
    assert_v1alpha2_within_v1(&v1alpha2, &facts_file(&repo.join("proto/wire-facts.tsv")), "proto/wire-facts.tsv");
}

/// Message types reachable from `roots` through message fields (maps included).
fn reachable(set: &FileDescriptorSet, package: &str, roots: impl IntoIterator<Item = String>) -> HashSet<String> {
    let file = set.file.iter().find(|f| f.package() == package).unwrap();
    let mut by_name: HashMap<String, &DescriptorProto> = HashMap::new();
    let mut stack: Vec<(String, &DescriptorProto)> =
        file.message_type.iter().map(|m| (format!(".{package}.{}", m.name()), m)).collect();
    while let Some((name, message)) = stack.pop() {
        stack.extend(message.nested_type.iter().map(|m| (format!("{name}.{}", m.name()), m)));
        by_name.insert(name, message);
    }
    let mut seen = HashSet::new();
    let mut todo: Vec<String> = roots.into_iter().collect();
    while let Some(name) = todo.pop() {
        if seen.insert(name.clone()) {
            let message = by_name.get(&name).unwrap_or_else(|| panic!("unknown message {name}"));
            todo.extend(message.field.iter().filter(|f| f.r#type() == Type::Message).map(|f| f.type_name().into()));
        }
    }
    seen
}

#[test]
fn key_value_only_travels_from_client_to_nidus() {
    let set = descriptors(V1ALPHA2_FDS);
    let rpcs: Vec<_> = set.file.iter().flat_map(|f| &f.service).flat_map(|s| &s.method).collect();
    let answers = reachable(&set, "runtime.v1alpha2", rpcs.iter().map(|m| m.output_type().to_string()));
    assert!(!answers.contains(".runtime.v1alpha2.KeyValue"), "a v1alpha2 answer carries KeyValue");
    let requests = reachable(&set, "runtime.v1alpha2", rpcs.iter().map(|m| m.input_type().to_string()));
    assert!(requests.contains(".runtime.v1alpha2.KeyValue"), "requests carry KeyValue (container env)");
}
