//! The workspace's layout rules, read from the source: no import cycle between the files of a
//! crate, and no module importing one above it (ARCHITECTURE.md). A file depends on another
//! when its own code names an item the other defines — through a path (`crate::…`,
//! `super::…`, a child module) or an import — resolved through re-exports to the file that
//! defines it. A `pub use` is an edge too: a reader who follows it lands in the other file.
//! Test modules (`#[cfg(test)]`) are left out.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // reads the workspace's source

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use faultline_e2e::repo_root;
use syn::visit::Visit;

/// Every source tree of the workspace: libraries, the binary, the integration-test binaries.
const SOURCE_ROOTS: &[(&str, &str)] = &[
    ("runtime/src", "lib.rs"),
    ("runtime/tests/it", "main.rs"),
    ("sim/src", "lib.rs"),
    ("sim/tests/it", "main.rs"),
    ("cli/src", "main.rs"),
    ("tests", "lib.rs"),
    ("tests/it", "main.rs"),
    ("examples/invoicing/src", "lib.rs"),
];

type ModPath = Vec<String>;

/// One file: its module path, what it declares and re-exports, what its code names.
struct File {
    children: BTreeSet<String>,
    /// Name → the path a `pub use` re-exports under it.
    reexports: BTreeMap<String, Vec<String>>,
    /// Paths a plain `use` imports, and paths the code writes.
    used: Vec<Vec<String>>,
    /// Single names the code writes (to tell which re-exports the file itself uses).
    names: BTreeSet<String>,
}

#[test]
fn no_file_imports_from_a_file_that_imports_from_it() {
    let mut cycles = Vec::new();
    for (root, top) in SOURCE_ROOTS {
        let files = read_crate(&repo_root().join(root), top);
        assert!(!files.is_empty(), "{root}: no source read");
        let graph = dependencies(&files);
        for cycle in strongly_connected(&graph).into_iter().filter(|c| c.len() > 1) {
            let names: Vec<String> = cycle.iter().map(display).collect();
            cycles.push(format!("{root}: {}", names.join(" <-> ")));
            // Each edge inside the cycle, so a reader sees which one to cut.
            for from in &cycle {
                let inside: Vec<String> = graph[from].iter().filter(|to| cycle.contains(to)).map(display).collect();
                cycles.push(format!("    {} -> {}", display(from), inside.join(", ")));
            }
        }
    }
    assert!(
        cycles.is_empty(),
        "import cycles between files (split what both sides share into a file of its own):\n{}",
        cycles.join("\n")
    );
}

/// Modules that sit below others and must never import them (ARCHITECTURE.md): `(crate,
/// module below, module above)`. A module is a file or a directory of files.
const FLOORS: &[(&str, &str, &str)] = &[
    // The world runs; its judge and the draws above it are not its business.
    ("sim/src", "world", "oracle"),
    ("sim/src", "world", "verdict"),
    ("sim/src", "world", "generate"),
    // The agent loop runs tools, queues and approvals; none of them runs the loop.
    ("runtime/src", "tool", "agent"),
    ("runtime/src", "config", "agent"),
    ("runtime/src", "mcp", "agent"),
    ("runtime/src", "approval", "agent"),
    ("runtime/src", "outbox", "agent"),
    ("runtime/src", "production", "agent"),
    ("runtime/src", "llm", "agent"),
    ("runtime/src", "store", "agent"),
    // The loop reads no schema: the command line and the builders turn the file into values.
    ("runtime/src", "agent", "config"),
];

#[test]
fn no_module_imports_a_module_above_it() {
    let mut wrong = Vec::new();
    for (root, below, above) in FLOORS {
        let top = SOURCE_ROOTS.iter().find(|(r, _)| r == root).expect("a source root").1;
        let graph = dependencies(&read_crate(&repo_root().join(root), top));
        assert!(graph.keys().any(|m| m.first().is_some_and(|s| s == below)), "{root}: no module {below}");
        for (from, targets) in graph.iter().filter(|(m, _)| m.first().is_some_and(|s| s == below)) {
            for to in targets.iter().filter(|t| t.first().is_some_and(|s| s == above)) {
                wrong.push(format!("{root}: {} imports {} ({below} sits below {above})", display(from), display(to)));
            }
        }
    }
    assert!(wrong.is_empty(), "imports up a floor:\n{}", wrong.join("\n"));
}

/// The command line and the simulator library each have one home per thing: no module name
/// in both `cli/src` and `sim/src` (a reader following `faultline sweep` never meets a second
/// `sweep`).
#[test]
fn no_module_name_is_in_both_the_binary_and_the_simulator() {
    let names = |root: &str| -> BTreeSet<String> {
        let files = read_crate(&repo_root().join(root), if root == "cli/src" { "main.rs" } else { "lib.rs" });
        files.keys().flat_map(|module| module.iter().cloned()).collect()
    };
    let both: Vec<String> = names("cli/src").intersection(&names("sim/src")).cloned().collect();
    assert!(both.is_empty(), "module names in both cli/src and sim/src: {both:?}");
}

/// The test itself must notice a cycle: two files that name each other's items.
#[test]
fn a_cycle_between_two_files_is_found() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("lib.rs"), "mod a;\nmod b;\n").unwrap();
    std::fs::write(dir.path().join("a.rs"), "pub struct A;\npub fn f() -> crate::b::B { crate::b::B }\n").unwrap();
    std::fs::write(dir.path().join("b.rs"), "use super::a::A;\npub struct B;\npub fn g() -> A { A }\n").unwrap();
    let graph = dependencies(&read_crate(dir.path(), "lib.rs"));
    let cycles: Vec<_> = strongly_connected(&graph).into_iter().filter(|c| c.len() > 1).collect();
    assert_eq!(cycles.len(), 1, "{graph:?}");
}

fn display(module: &ModPath) -> String {
    if module.is_empty() {
        "crate root".to_owned()
    } else {
        module.join("::")
    }
}

/// Every file of the crate rooted at `dir/top`, by module path.
fn read_crate(dir: &Path, top: &str) -> BTreeMap<ModPath, File> {
    let mut files = BTreeMap::new();
    read_file(&dir.join(top), dir.to_path_buf(), Vec::new(), &mut files);
    files
}

fn read_file(path: &Path, dir: PathBuf, module: ModPath, files: &mut BTreeMap<ModPath, File>) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let parsed = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut file =
        File { children: BTreeSet::new(), reexports: BTreeMap::new(), used: Vec::new(), names: BTreeSet::new() };
    let mut inline = Vec::new();
    for item in parsed.items.iter().filter(|item| !is_test(item)) {
        match item {
            // A module included by `#[path]` is another tree's file (a shared reader): not
            // followed.
            syn::Item::Mod(m) if m.attrs.iter().any(|a| a.path().is_ident("path")) => {}
            syn::Item::Mod(m) if m.content.is_none() => {
                file.children.insert(m.ident.to_string());
            }
            // Inline modules other than tests are part of this file.
            syn::Item::Mod(m) => inline.extend(m.content.iter().flat_map(|(_, items)| items.clone())),
            syn::Item::Use(u) => {
                let public = !matches!(u.vis, syn::Visibility::Inherited);
                flatten(&u.tree, Vec::new(), &mut |name, target| match (public, name) {
                    (true, Some(name)) => {
                        file.reexports.insert(name, target);
                    }
                    _ => file.used.push(target),
                });
            }
            other => CodePaths { file: &mut file }.visit_item(other),
        }
    }
    for item in &inline {
        CodePaths { file: &mut file }.visit_item(item);
    }
    let children = file.children.clone();
    files.insert(module.clone(), file);
    for child in children {
        let flat = dir.join(format!("{child}.rs"));
        let nested = dir.join(&child).join("mod.rs");
        let found = if flat.exists() { flat } else { nested };
        let mut path = module.clone();
        path.push(child.clone());
        read_file(&found, dir.join(&child), path, files);
    }
}

fn is_test(item: &syn::Item) -> bool {
    let attrs = match item {
        syn::Item::Mod(m) => &m.attrs,
        syn::Item::Fn(f) => &f.attrs,
        syn::Item::Use(u) => &u.attrs,
        syn::Item::Impl(i) => &i.attrs,
        _ => return false,
    };
    // `cfg(test)`, not `cfg(feature = "testing")`: the word `test` on its own.
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && quote::ToTokens::to_token_stream(&a.meta)
                .to_string()
                .split(|c: char| !c.is_alphanumeric() && c != '_' && c != '"')
                .any(|word| word == "test")
    })
}

/// Flattens a use tree into (the name it brings into scope, the path it names); `None` for
/// a glob.
fn flatten(tree: &syn::UseTree, prefix: Vec<String>, add: &mut dyn FnMut(Option<String>, Vec<String>)) {
    let with = |segment: String| prefix.iter().cloned().chain([segment]).collect::<Vec<_>>();
    match tree {
        syn::UseTree::Path(p) => flatten(&p.tree, with(p.ident.to_string()), add),
        syn::UseTree::Name(n) if n.ident == "self" => add(prefix.last().cloned(), prefix.clone()),
        syn::UseTree::Name(n) => add(Some(n.ident.to_string()), with(n.ident.to_string())),
        syn::UseTree::Rename(r) => add(Some(r.rename.to_string()), with(r.ident.to_string())),
        syn::UseTree::Glob(_) => add(None, prefix.clone()),
        syn::UseTree::Group(g) => g.items.iter().for_each(|t| flatten(t, prefix.clone(), add)),
    }
}

/// Collects the paths a file's code writes.
struct CodePaths<'a> {
    file: &'a mut File,
}

impl<'ast> Visit<'ast> for CodePaths<'_> {
    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        if segments.len() == 1 {
            self.file.names.insert(segments[0].clone());
        } else {
            self.file.used.push(segments);
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_item_mod(&mut self, module: &'ast syn::ItemMod) {
        if !is_test(&syn::Item::Mod(module.clone())) {
            syn::visit::visit_item_mod(self, module);
        }
    }
}

/// Each file's dependencies on the other files of its crate.
fn dependencies(files: &BTreeMap<ModPath, File>) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let mut graph = BTreeMap::new();
    for (module, file) in files {
        let mut paths: Vec<Vec<String>> = file.used.clone();
        // A re-export is an edge too: the file's readers reach the item through it.
        paths.extend(file.reexports.values().cloned());
        let targets: BTreeSet<ModPath> = paths
            .iter()
            .filter_map(|path| defining_file(files, module, path))
            .filter(|target| target != module)
            .collect();
        graph.insert(module.clone(), targets);
    }
    graph
}

/// The file that defines what `path` (written in `from`) names, if it is in this crate.
fn defining_file(files: &BTreeMap<ModPath, File>, from: &ModPath, path: &[String]) -> Option<ModPath> {
    let (first, rest) = path.split_first()?;
    let mut module: ModPath = match first.as_str() {
        "crate" => Vec::new(),
        "self" => from.clone(),
        "super" => from[..from.len().checked_sub(1)?].to_vec(),
        child if files.get(from).is_some_and(|f| f.children.contains(child)) => {
            from.iter().cloned().chain([child.to_owned()]).collect()
        }
        _ => return None,
    };
    let mut rest = rest.to_vec();
    while rest.first().is_some_and(|s| s == "super") {
        module.pop();
        rest.remove(0);
    }
    for _ in 0..32 {
        let Some(next) = rest.first() else { break };
        let file = files.get(&module)?;
        if file.children.contains(next) {
            module.push(next.clone());
            rest.remove(0);
        } else if let Some(target) = file.reexports.get(next) {
            // Re-exported here: the item lives where the re-export points.
            let target = target.clone();
            let tail: Vec<String> = rest[1..].to_vec();
            let resolved = defining_file(files, &module, &target.iter().cloned().chain(tail).collect::<Vec<_>>());
            return resolved.or(Some(module));
        } else {
            break;
        }
    }
    files.contains_key(&module).then_some(module)
}

/// Tarjan's strongly connected components of `graph`.
fn strongly_connected(graph: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct State<'g> {
        graph: &'g BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<&'g ModPath, usize>,
        low: BTreeMap<&'g ModPath, usize>,
        stack: Vec<&'g ModPath>,
        on_stack: BTreeSet<&'g ModPath>,
        found: Vec<Vec<ModPath>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g ModPath) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            let Some((w, _)) = s.graph.get_key_value(w) else { continue };
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            s.found.push(component);
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !state.index.contains_key(v) {
            visit(&mut state, v);
        }
    }
    state.found
}
