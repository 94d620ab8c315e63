//! The layering of docs/design.md's module map, checked against the source
//! (`make lint` runs this test). The map's numbered list of layers gives each
//! top-level module of src/ its layer, lowest first; a module may name (by a
//! `crate::` path, a `super::` path that leaves it, or, in a program,
//! `nidus::`) only modules of its own layer or lower ones, and no modules may
//! name each other in a cycle. Comments and string literals do not count;
//! unit tests do. A failure names the file and line of each offending path.
//!
//! Pure reading of files: no root, no daemon.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What the map says: each layer's name and its modules, lowest first.
#[derive(Debug)]
struct Layers {
    layers: Vec<(String, Vec<String>)>,
}

impl Layers {
    fn layer_of(&self, module: &str) -> Option<usize> {
        self.layers.iter().position(|(_, modules)| modules.iter().any(|m| m == module))
    }

    fn name(&self, layer: usize) -> &str {
        &self.layers[layer].0
    }
}

/// The two programs' entries in the map (they are not modules of the library).
const PROGRAMS: [&str; 2] = ["main.rs", "bin/"];

/// The numbered list under `### Layers` in the `## Module map` section: lines
/// `N. **Name** ...: `a.rs`, `b/`, …`, each module as its file (`x.rs`), its
/// directory (`x/`) or, for modules written inside lib.rs, its name.
fn parse_layers(design: &str) -> Result<Layers, String> {
    let section = design
        .split("\n## ")
        .find(|s| s.starts_with("Module map"))
        .ok_or("docs/design.md has no \"## Module map\" section")?;
    let list =
        section.split("\n### ").find(|s| s.starts_with("Layers")).ok_or("the module map has no \"### Layers\" list")?;
    let mut layers: Vec<(String, Vec<String>)> = Vec::new();
    for line in list.lines() {
        let trimmed = line.trim_start();
        let item = trimmed.split_once(". ").filter(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        let text = match item {
            Some((number, rest)) => {
                if number.parse::<usize>() != Ok(layers.len() + 1) {
                    return Err(format!("layer {number:?} is out of order (expected {})", layers.len() + 1));
                }
                let name = rest.strip_prefix("**").and_then(|r| r.split_once("**")).map(|(n, _)| n.to_string());
                layers.push((name.ok_or(format!("layer {number} has no **name**"))?, Vec::new()));
                rest
            }
            // A wrapped line of the item above.
            None if !layers.is_empty() && line.starts_with(' ') && !trimmed.is_empty() => trimmed,
            None => continue,
        };
        let Some((_, modules)) = layers.last_mut() else { continue };
        for (i, token) in text.split('`').enumerate() {
            if i % 2 == 1 {
                let module = match token {
                    program if PROGRAMS.contains(&program) => program,
                    dir if dir.ends_with('/') => dir.trim_end_matches('/'),
                    file => file.strip_suffix(".rs").unwrap_or(file),
                };
                modules.push(module.to_string());
            }
        }
    }
    if layers.is_empty() {
        return Err("the \"### Layers\" list names no layer".into());
    }
    Ok(Layers { layers })
}

/// The top-level modules lib.rs declares (`mod x;`, `pub mod x { … }`).
fn lib_modules(lib_rs: &str) -> Vec<String> {
    let code = code_only(lib_rs);
    let mut modules = Vec::new();
    for line in code.lines() {
        // Top level only: an item inside a module is indented.
        if line.starts_with(char::is_whitespace) {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if let Some(i) = words.iter().position(|w| *w == "mod") {
            if let Some(name) = words.get(i + 1) {
                modules.push(name.trim_end_matches(';').trim_end_matches('{').to_string());
            }
        }
    }
    modules
}

/// `text` with every comment and the inside of every string and character
/// literal blanked out (newlines kept, so lines keep their numbers).
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r' && (i == 0 || !ident(chars[i - 1]) || chars[i - 1] == 'b') && matches!(next, Some('"' | '#'))
        {
            // A raw string: r"…", r#"…"#, br"…".
            let mut hashes = 0;
            let mut j = i + 1;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            out.extend(std::iter::repeat_n(' ', j + 1 - i));
            i = j + 1;
            while i < chars.len() {
                if chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
                    out.extend(std::iter::repeat_n(' ', hashes + 1));
                    i += hashes + 1;
                    break;
                }
                out.push(blank(chars[i]));
                i += 1;
            }
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                let skip = if chars[i] == '\\' { 2 } else { 1 };
                for k in 0..skip {
                    if let Some(&c) = chars.get(i + k) {
                        out.push(blank(c));
                    }
                }
                i += skip;
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')) {
            // A character literal ('a', '\n', '\''), not a lifetime.
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                let skip = if chars[i] == '\\' { 2 } else { 1 };
                out.extend(std::iter::repeat_n(' ', skip));
                i += skip;
            }
            out.push(' ');
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// One path from a module to a top-level module: where it is written.
#[derive(Debug, Clone)]
struct Reference {
    file: String,
    line: usize,
    to: String,
}

/// The top-level modules `text` names, with their lines. `module_path` is
/// the file's module from the crate root (`["cri", "stats"]` for
/// src/cri/stats.rs), for the `super::` paths; `via` is how paths from the
/// crate's root begin in this file (`crate` in the library, `nidus` in a
/// program).
fn references(file: &str, text: &str, module_path: &[String], via: &str) -> Vec<Reference> {
    let code = code_only(text);
    let chars: Vec<char> = code.chars().collect();
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut found = Vec::new();
    let mut line = 1;
    // Inline modules open at this point (`mod tests { … }`): their names and
    // the brace depth inside them.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut pending_mod: Option<String> = None;
    let word_at = |i: usize, word: &str| {
        let w: Vec<char> = word.chars().collect();
        chars.get(i..i + w.len()) == Some(&w[..])
            && (i == 0 || !ident(chars[i - 1]))
            && !chars.get(i + w.len()).copied().is_some_and(ident)
    };
    let starts_path = |i: usize| {
        // Not the tail of a longer path (`a::crate` cannot occur, `x::super` can).
        let before: String = chars[..i].iter().rev().take_while(|c| !c.is_whitespace()).collect();
        !before.starts_with("::")
    };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\n' => line += 1,
            '{' => {
                depth += 1;
                if let Some(name) = pending_mod.take() {
                    inline.push((name, depth));
                }
            }
            '}' => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth -= 1;
            }
            ';' => pending_mod = None,
            _ => {}
        }
        if word_at(i, "mod") {
            let name: String =
                chars[i + 3..].iter().skip_while(|c| c.is_whitespace()).take_while(|c| ident(**c)).collect();
            pending_mod = Some(name);
        }
        let (at_root, after) = if word_at(i, via) && chars.get(i + via.len()..i + via.len() + 2) == Some(&[':', ':']) {
            (true, i + via.len() + 2)
        } else if via == "crate" && word_at(i, "super") && starts_path(i) {
            let mut j = i;
            let mut ups = 0;
            while word_at(j, "super") && chars.get(j + 5..j + 7) == Some(&[':', ':']) {
                ups += 1;
                j += 7;
            }
            // From the file's module and the inline ones it is in, as many
            // `super`s as there are levels reach the crate's root.
            let here = module_path.len() + inline.len();
            (ups == here && ups > 0, j)
        } else {
            (false, i + 1)
        };
        if at_root {
            for to in first_names(&chars[after..]) {
                found.push(Reference { file: file.to_string(), line, to });
            }
            // Count the newlines skipped over.
            line += chars[i..after].iter().filter(|c| **c == '\n').count();
            i = after;
            continue;
        }
        i += 1;
    }
    found
}

/// The first name of a path's tail: `x` of `x::y`, or `a` and `b` of
/// `{a::y, b, c::{d, e}}`.
fn first_names(tail: &[char]) -> Vec<String> {
    let ident = |c: &char| c.is_alphanumeric() || *c == '_';
    if tail.first() != Some(&'{') {
        let name: String = tail.iter().take_while(|c| ident(c)).collect();
        return if name.is_empty() { Vec::new() } else { vec![name] };
    }
    let mut names = Vec::new();
    let mut depth = 0;
    let mut expecting = true;
    for (k, c) in tail.iter().enumerate() {
        match c {
            '{' => {
                depth += 1;
                expecting = depth == 1;
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            ',' if depth == 1 => expecting = true,
            c if expecting && depth == 1 && ident(c) => {
                let name: String = tail[k..].iter().take_while(|c| ident(c)).collect();
                names.push(name);
                expecting = false;
            }
            _ => {}
        }
    }
    names
}

/// One file of the check: its path (as shown), its module path below the
/// crate root (the first part is the top-level module), and its text.
struct Source {
    file: String,
    module_path: Vec<String>,
    text: String,
}

/// Every violation: paths from a lower layer to a higher one, cycles,
/// modules missing from the map, names in the map that are no module.
fn check(layers: &Layers, modules: &[String], sources: &[Source], programs: &[Source]) -> Vec<String> {
    let mut errors = Vec::new();
    let known: BTreeSet<&str> = modules.iter().map(String::as_str).collect();
    for module in modules {
        let count = layers.layers.iter().flat_map(|(_, m)| m).filter(|m| *m == module).count();
        if count != 1 {
            errors.push(format!("module `{module}` is in {count} layers of docs/design.md's map (it must be in one)"));
        }
    }
    for (name, listed) in &layers.layers {
        for module in listed {
            if !known.contains(module.as_str()) && !PROGRAMS.contains(&module.as_str()) {
                errors.push(format!("layer {name} names `{module}`, which is no top-level module of src/"));
            }
        }
    }
    // module → module it names → where (the first time).
    let mut edges: BTreeMap<String, BTreeMap<String, Reference>> = BTreeMap::new();
    let all = sources.iter().map(|s| (s, "crate")).chain(programs.iter().map(|s| (s, "nidus")));
    for (source, via) in all {
        let from = source.module_path[0].clone();
        let Some(from_layer) = layers.layer_of(&from) else { continue };
        for reference in references(&source.file, &source.text, &source.module_path, via) {
            if reference.to == from || !known.contains(reference.to.as_str()) {
                continue;
            }
            let Some(to_layer) = layers.layer_of(&reference.to) else { continue };
            if to_layer > from_layer {
                errors.push(format!(
                    "{}:{}: `{from}` (layer {} {}) names `{}` (layer {} {}): a layer may name only its own and lower ones",
                    reference.file,
                    reference.line,
                    from_layer + 1,
                    layers.name(from_layer),
                    reference.to,
                    to_layer + 1,
                    layers.name(to_layer),
                ));
            }
            edges.entry(from.clone()).or_default().entry(reference.to.clone()).or_insert(reference);
        }
    }
    for cycle in cycles(&edges) {
        let mut steps = Vec::new();
        for (k, from) in cycle.iter().enumerate() {
            let to = &cycle[(k + 1) % cycle.len()];
            let at = &edges[from][to];
            steps.push(format!("`{from}` names `{to}` at {}:{}", at.file, at.line));
        }
        errors.push(format!("import cycle: {}", steps.join(", ")));
    }
    errors
}

/// One cycle through each strongly connected group of two or more modules.
fn cycles(edges: &BTreeMap<String, BTreeMap<String, Reference>>) -> Vec<Vec<String>> {
    let next = |m: &str| -> Vec<String> { edges.get(m).map(|t| t.keys().cloned().collect()).unwrap_or_default() };
    let reaches = |from: &str, to: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_string()];
        while let Some(m) = stack.pop() {
            if m == to {
                return true;
            }
            if seen.insert(m.clone()) {
                stack.extend(next(&m));
            }
        }
        false
    };
    let mut done: BTreeSet<String> = BTreeSet::new();
    let mut found = Vec::new();
    for start in edges.keys() {
        if done.contains(start) {
            continue;
        }
        let group: BTreeSet<String> =
            edges.keys().filter(|m| reaches(start, m) && reaches(m, start)).cloned().collect();
        done.extend(group.iter().cloned());
        if group.len() < 2 {
            continue;
        }
        // A shortest way back to `start` within the group, breadth first.
        let mut came_from: BTreeMap<String, String> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start.clone()]);
        'search: while let Some(m) = queue.pop_front() {
            for n in next(&m).into_iter().filter(|n| group.contains(n)) {
                if &n == start {
                    let mut cycle = vec![m.clone()];
                    while let Some(p) = came_from.get(cycle.last().unwrap_or(start)) {
                        cycle.push(p.clone());
                    }
                    cycle.reverse();
                    found.push(cycle);
                    break 'search;
                }
                if !came_from.contains_key(&n) && n != *start {
                    came_from.insert(n.clone(), m.clone());
                    queue.push_back(n);
                }
            }
        }
    }
    found
}

/// The files of the library's module tree, from lib.rs's `mod` declarations
/// down (`x.rs` or `x/mod.rs`, then their own `mod y;` beside them).
fn module_tree(src: &Path, modules: &[String]) -> Vec<Source> {
    let mut sources = Vec::new();
    let mut todo: Vec<(PathBuf, Vec<String>)> = Vec::new();
    for module in modules {
        for candidate in [src.join(format!("{module}.rs")), src.join(module).join("mod.rs")] {
            if candidate.is_file() {
                todo.push((candidate, vec![module.clone()]));
            }
        }
    }
    while let Some((path, module_path)) = todo.pop() {
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        // Where this file's own submodules are: beside a mod.rs, else in the
        // directory named after the file.
        let dir = match path.file_name().and_then(|n| n.to_str()) {
            Some("mod.rs") => path.parent().map(Path::to_path_buf),
            _ => Some(path.with_extension("")),
        };
        for line in code_only(&text).lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let declared = match words.as_slice() {
                ["mod", name] | ["pub", "mod", name] | ["pub(crate)", "mod", name] | ["pub(super)", "mod", name] => {
                    name.strip_suffix(';')
                }
                _ => None,
            };
            if let (Some(name), Some(dir)) = (declared, &dir) {
                for candidate in [dir.join(format!("{name}.rs")), dir.join(name).join("mod.rs")] {
                    if candidate.is_file() {
                        let mut below = module_path.clone();
                        below.push(name.to_string());
                        todo.push((candidate, below));
                    }
                }
            }
        }
        let file = path.strip_prefix(src.parent().unwrap_or(src)).unwrap_or(&path).display().to_string();
        sources.push(Source { file, module_path, text });
    }
    sources.sort_by(|a, b| a.file.cmp(&b.file));
    sources
}

#[test]
fn the_source_keeps_to_the_layers_of_the_module_map() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    let design = std::fs::read_to_string(root.join("docs/design.md")).expect("reading docs/design.md");
    let layers = parse_layers(&design).unwrap_or_else(|e| panic!("docs/design.md: {e}"));
    let lib_rs = std::fs::read_to_string(src.join("lib.rs")).expect("reading src/lib.rs");
    let modules = lib_modules(&lib_rs);

    // Nothing here may pass for want of input.
    assert!(layers.layers.len() >= 3, "the map has {} layers: {:?}", layers.layers.len(), layers.layers);
    assert!(modules.len() >= 20, "lib.rs declares only {modules:?}");
    for entry in std::fs::read_dir(&src).expect("listing src/") {
        let name = entry.expect("listing src/").file_name().to_string_lossy().into_owned();
        let module = name.strip_suffix(".rs").unwrap_or(&name);
        match name.as_str() {
            "lib.rs" => {}
            "main.rs" | "bin" => {
                let program = if name == "bin" { "bin/" } else { "main.rs" };
                assert!(layers.layer_of(program).is_some(), "`{program}` is in no layer of docs/design.md's map");
            }
            _ => assert!(
                modules.iter().any(|m| m == module),
                "src/{name} is no module lib.rs declares (every top-level module must be in the map)"
            ),
        }
    }
    let sources = module_tree(&src, &modules);
    assert!(sources.len() >= 150, "only {} files in the module tree", sources.len());
    let mut programs = vec![Source {
        file: "src/main.rs".into(),
        module_path: vec!["main.rs".into()],
        text: std::fs::read_to_string(src.join("main.rs")).expect("reading src/main.rs"),
    }];
    for entry in std::fs::read_dir(src.join("bin")).expect("listing src/bin") {
        let path = entry.expect("listing src/bin").path();
        programs.push(Source {
            file: format!("src/bin/{}", path.file_name().unwrap_or_default().to_string_lossy()),
            module_path: vec!["bin/".into()],
            text: std::fs::read_to_string(&path).expect("reading a program"),
        });
    }
    let paths: usize = sources.iter().map(|s| references(&s.file, &s.text, &s.module_path, "crate").len()).sum();
    assert!(paths >= 500, "only {paths} paths to top-level modules found in src/");

    let errors = check(&layers, &modules, &sources, &programs);
    assert!(errors.is_empty(), "the source breaks docs/design.md's layers:\n{}", errors.join("\n"));
}

// The check itself, on small made-up trees.

const MAP: &str = "# x\n\n## Module map\n\n### Layers\n\n1. **Leaves**: `ids.rs`, `api`\n2. **Linux**: `linux/`\n3. **Lifecycle**: `pod/`, `container/`,\n   `runtime.rs`\n4. **Programs**: `main.rs`, `bin/`\n\n| module | owns |\n\n## Next\n";

fn made_up(files: &[(&str, &str)]) -> Vec<Source> {
    files
        .iter()
        .map(|(file, text)| {
            let inner = file.trim_start_matches("src/").trim_end_matches(".rs").trim_end_matches("/mod");
            Source {
                file: file.to_string(),
                module_path: inner.split('/').map(String::from).collect(),
                text: text.to_string(),
            }
        })
        .collect()
}

fn modules() -> Vec<String> {
    ["ids", "api", "linux", "pod", "container", "runtime"].map(String::from).to_vec()
}

#[test]
fn the_map_is_read_with_its_wrapped_lines() {
    let layers = parse_layers(MAP).unwrap();
    let names: Vec<&str> = layers.layers.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["Leaves", "Linux", "Lifecycle", "Programs"]);
    assert_eq!(layers.layer_of("runtime"), Some(2));
    assert_eq!(layers.layer_of("api"), Some(0));
    assert_eq!(layers.layer_of("bin/"), Some(3));
    assert!(parse_layers("## Module map\n\nno list\n").is_err());
}

#[test]
fn a_planted_import_from_a_lower_layer_to_a_higher_one_fails_naming_file_and_line() {
    let layers = parse_layers(MAP).unwrap();
    let sources = made_up(&[
        ("src/linux/mod.rs", "//! Linux.\nuse crate::ids::Id;\n\npub fn f() {\n    crate::pod::manager::run();\n}\n"),
        ("src/pod/mod.rs", "use crate::ids::Id;\n"),
    ]);
    let errors = check(&layers, &modules(), &sources, &[]);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with("src/linux/mod.rs:5: `linux` (layer 2 Linux) names `pod` (layer 3 Lifecycle)"),
        "{}",
        errors[0]
    );
}

#[test]
fn a_cycle_within_a_layer_fails_naming_each_step() {
    let layers = parse_layers(MAP).unwrap();
    let sources = made_up(&[
        ("src/pod/manager.rs", "use crate::{ids, container::View};\n"),
        ("src/container/mod.rs", "fn f() {\n    let _ = super::pod::X;\n}\n"),
        ("src/runtime.rs", "use crate::pod;\n"),
    ]);
    let errors = check(&layers, &modules(), &sources, &[]);
    assert_eq!(
        errors,
        ["import cycle: `container` names `pod` at src/container/mod.rs:2, `pod` names `container` at src/pod/manager.rs:1"]
    );
}

#[test]
fn comments_strings_and_paths_inside_a_module_do_not_count() {
    let layers = parse_layers(MAP).unwrap();
    let sources = made_up(&[(
        "src/linux/net.rs",
        "//! Used by [`crate::pod`].\n/* crate::pod /* nested */ crate::pod */\nconst A: &str = \"crate::pod\";\nconst B: &str = r#\"crate::pod \"# ;\nconst C: char = '\"';\nfn f<'a>(x: &'a str) { super::other::g(); self::h(); }\nmod tests {\n    use super::super::ids;\n}\n",
    )]);
    assert_eq!(check(&layers, &modules(), &sources, &[]), Vec::<String>::new());
    let found = references(&sources[0].file, &sources[0].text, &sources[0].module_path, "crate");
    // `super::super` inside `mod tests` of linux/net.rs is linux; only a third `super` reaches the crate root.
    assert!(found.is_empty(), "{found:?}");
    let deeper = "fn f() {}\nmod tests {\n    use super::super::super::{ids::Id, pod};\n}\n";
    let found = references("src/linux/net.rs", deeper, &["linux".to_string(), "net".to_string()], "crate");
    assert_eq!(found.iter().map(|r| (r.line, r.to.as_str())).collect::<Vec<_>>(), [(3, "ids"), (3, "pod")]);
}

#[test]
fn a_module_missing_from_the_map_or_a_program_naming_the_library_wrongly_fails() {
    let layers = parse_layers(MAP).unwrap();
    let mut modules = modules();
    modules.push("stats".into());
    let text = "fn main() {\n    nidus::runtime::go();\n}\n";
    let found = references("src/main.rs", text, &[], "nidus");
    assert_eq!(found.iter().map(|r| (r.line, r.to.as_str())).collect::<Vec<_>>(), [(2, "runtime")]);
    let programs = [Source { file: "src/main.rs".into(), module_path: vec!["main.rs".into()], text: text.into() }];
    let errors = check(&layers, &modules, &[], &programs);
    assert_eq!(errors, ["module `stats` is in 0 layers of docs/design.md's map (it must be in one)"]);
    let bad_map = MAP.replace("`ids.rs`, ", "`ids.rs`, `gone.rs`, ");
    let errors = check(&parse_layers(&bad_map).unwrap(), &self::modules(), &[], &[]);
    assert_eq!(errors, ["layer Leaves names `gone`, which is no top-level module of src/"]);
}
