//! A crate's public surface read from its source with `syn`, as reviewed lines: every public
//! module reachable from `lib.rs`, each public item at the one path it is exported under (and
//! the items reachable by more than one), the public methods of its inherent impls, the traits
//! it implements, and at the end every type from another crate that a public signature names,
//! with where. `#[cfg(feature = …)]` is evaluated for the crate's default features, read from
//! its `Cargo.toml`.
//!
//! One reader for every crate that guards its surface: the runtime's `public_api` test and the
//! simulator's (which includes this file by path).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use quote::ToTokens;

/// Crates whose types are the language's own, not a dependency's.
const LANGUAGE_CRATES: &[&str] = &["std", "core", "alloc"];

/// One module's items and what its `use` declarations name.
struct Module {
    /// `crate::store::scan` as `["store", "scan"]`.
    path: Vec<String>,
    /// Reachable from outside the crate: every module on the way is `pub`.
    public: bool,
    items: Vec<syn::Item>,
    /// Name in scope → the path it was imported from, as written (`crate::…`, `super::…`, a
    /// crate name), and whether the import is `pub`.
    uses: BTreeMap<String, (Vec<String>, bool)>,
    /// The modules of `use …::*` declarations, as written.
    globs: Vec<Vec<String>>,
}

/// The crate being listed: its name (the first segment of every listed path) and the
/// features its `#[cfg(feature = …)]` attributes are evaluated for.
pub struct Crate {
    pub name: String,
    pub features: BTreeSet<String>,
}

impl Crate {
    /// The crate whose manifest is `manifest` (`…/Cargo.toml`), with its default features:
    /// the surface an embedder gets without asking for more.
    pub fn with_default_features(manifest: &Path) -> Crate {
        #[allow(clippy::disallowed_methods)] // reads the crate's own manifest
        let text = std::fs::read_to_string(manifest).unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
        let parsed: toml::Table = text.parse().unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
        let name = parsed["package"]["name"].as_str().expect("a package name").replace('-', "_");
        let default = parsed.get("features").and_then(|f| f.get("default")).and_then(|d| d.as_array());
        let features = default.into_iter().flatten().map(|f| f.as_str().expect("a feature name").to_owned()).collect();
        Crate { name, features }
    }
}

/// A crate's public surface as listed lines, and the items exported by more than one path.
pub fn listing(krate: &Crate, src: &Path) -> (String, Vec<String>) {
    Surface::read(krate, src).listing()
}

struct Surface<'c> {
    krate: &'c Crate,
    modules: Vec<Module>,
}

impl<'c> Surface<'c> {
    fn read(krate: &'c Crate, src: &Path) -> Surface<'c> {
        let mut surface = Surface { krate, modules: Vec::new() };
        surface.read_module(Vec::new(), true, &src.join("lib.rs"), src.to_path_buf());
        surface
    }

    fn read_module(&mut self, path: Vec<String>, public: bool, file: &Path, dir: PathBuf) {
        #[allow(clippy::disallowed_methods)] // reads the crate's own source
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let parsed = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        self.add_items(path, public, parsed.items, dir);
    }

    fn add_items(&mut self, path: Vec<String>, public: bool, items: Vec<syn::Item>, dir: PathBuf) {
        let items: Vec<syn::Item> = items.into_iter().filter(|item| active(self.krate, attrs_of(item))).collect();
        let mut uses = BTreeMap::new();
        let mut globs = Vec::new();
        for item in &items {
            if let syn::Item::Use(u) = item {
                let is_pub = matches!(u.vis, syn::Visibility::Public(_));
                assert!(!is_pub || !has_glob(&u.tree), "`pub use …::*` in {path:?}: export each item by name");
                flatten_use(&u.tree, Vec::new(), &mut |name, target| match name {
                    Some(name) => {
                        uses.insert(name, (target, is_pub));
                    }
                    None => globs.push(target),
                });
            }
        }
        let children: Vec<syn::ItemMod> =
            items.iter().filter_map(|i| if let syn::Item::Mod(m) = i { Some(m.clone()) } else { None }).collect();
        self.modules.push(Module { path: path.clone(), public, items, uses, globs });
        for child in children {
            let name = child.ident.to_string();
            let mut child_path = path.clone();
            child_path.push(name.clone());
            let child_public = public && matches!(child.vis, syn::Visibility::Public(_));
            match child.content {
                Some((_, items)) => self.add_items(child_path, child_public, items, dir.join(&name)),
                None => {
                    let flat = dir.join(format!("{name}.rs"));
                    let file = if flat.exists() { flat } else { dir.join(&name).join("mod.rs") };
                    self.read_module(child_path, child_public, &file, dir.join(&name));
                }
            }
        }
    }

    fn module(&self, path: &[String]) -> Option<&Module> {
        self.modules.iter().find(|m| m.path == path)
    }

    /// Where `name`, as seen from module `from`, is defined: (module path, item name), or the
    /// external path it names.
    fn resolve(&self, from: &[String], name: &str, depth: usize) -> Resolved {
        if depth >= 32 {
            // Only globs that import each other lead around in a circle: the name is not there.
            return Resolved::Unknown;
        }
        let Some(module) = self.module(from) else { return Resolved::Unknown };
        if module.items.iter().any(|item| item_name(item).as_deref() == Some(name)) {
            return Resolved::Local(from.to_vec(), name.to_owned());
        }
        if let Some((target, _)) = module.uses.get(name) {
            return self.resolve_path(from, target, depth + 1);
        }
        for glob in &module.globs {
            let target: Vec<String> = glob.iter().cloned().chain([name.to_owned()]).collect();
            if let found @ (Resolved::Local(..) | Resolved::External(_)) = self.resolve_path(from, &target, depth + 1) {
                if matches!(found, Resolved::Local(..)) {
                    return found;
                }
            }
        }
        Resolved::Unknown
    }

    /// Resolves a written path (`crate::a::B`, `super::B`, `sub::B`, `tokio::sync::Notify`)
    /// seen from module `from`.
    fn resolve_path(&self, from: &[String], target: &[String], depth: usize) -> Resolved {
        let (last, prefix) = target.split_last().expect("a path has a segment");
        let (mut module, rest) = strip_keywords(from, prefix);
        let keyword_led = rest.len() != prefix.len();
        match rest.first().map(String::as_str) {
            _ if keyword_led => {}
            Some(first) if self.module(&[from, &[first.to_owned()]].concat()).is_none() => {
                // Not a child module: a crate name, unless the name is imported here.
                let tail = rest[1..].iter().chain([last]).cloned().collect::<Vec<_>>().join("::");
                return match self.resolve(from, first, depth + 1) {
                    Resolved::Local(m, n) => {
                        let mut inner = vec!["crate".to_owned()];
                        inner.extend(m);
                        inner.push(n);
                        inner.extend(rest[1..].iter().cloned());
                        inner.push(last.clone());
                        self.resolve_path(&[], &inner, depth + 1)
                    }
                    Resolved::External(imported) => Resolved::External(format!("{imported}::{tail}")),
                    Resolved::Unknown => Resolved::External(target.join("::")),
                };
            }
            None if LANGUAGE_CRATES.contains(&last.as_str()) => return Resolved::Unknown,
            _ => {}
        }
        module.extend(rest.iter().cloned());
        if self.module(&module).is_none() {
            return Resolved::Unknown;
        }
        self.resolve(&module, last, depth)
    }

    /// The public paths of each public item: where it is defined (a `pub` item in a public
    /// module) and where a public module re-exports it.
    fn exports(&self) -> BTreeMap<(Vec<String>, String), Vec<String>> {
        let mut exports: BTreeMap<(Vec<String>, String), Vec<String>> = BTreeMap::new();
        for module in self.modules.iter().filter(|m| m.public) {
            for item in &module.items {
                if let (Some(name), true) = (item_name(item), is_pub(item)) {
                    if !matches!(item, syn::Item::Mod(_)) && !hidden(attrs_of(item)) {
                        exports.entry((module.path.clone(), name.clone())).or_default().push(display(
                            self.krate,
                            &module.path,
                            &name,
                        ));
                    }
                }
            }
            for (name, (target, is_pub)) in &module.uses {
                if !is_pub {
                    continue;
                }
                match self.resolve_path(&module.path, target, 0) {
                    Resolved::Local(m, n) => {
                        exports.entry((m, n)).or_default().push(display(self.krate, &module.path, name))
                    }
                    Resolved::External(path) => exports
                        .entry((vec!["<external>".into()], path))
                        .or_default()
                        .push(display(self.krate, &module.path, name)),
                    Resolved::Unknown => {
                        let maker = self.macro_maker(&module.path, target);
                        let made_by = self.module(&maker).map(macro_calls).unwrap_or_default();
                        assert!(!made_by.is_empty(), "`pub use` of {target:?} in {:?} does not resolve", module.path);
                        let at = display(self.krate, &module.path, name);
                        let key = std::iter::once("<macro>".to_owned()).chain(maker).collect();
                        exports.entry((key, at.clone())).or_default().push(at);
                    }
                }
            }
        }
        exports
    }

    /// The module whose macro calls make the item a `pub use` of `target` (seen from `from`)
    /// names: the target's module, or the module a re-export there leads to.
    fn macro_maker(&self, from: &[String], target: &[String]) -> Vec<String> {
        let (mut module, mut target) = (target_module(from, target), target.to_vec());
        for _ in 0..32 {
            let name = target.last().expect("a path has a segment");
            let Some(found) = self.module(&module) else { break };
            if !macro_calls(found).is_empty() {
                break;
            }
            let Some((next, _)) = found.uses.get(name) else { break };
            let next = next.clone();
            module = target_module(&module, &next);
            target = next;
        }
        module
    }

    /// The listing, and the items exported by more than one path.
    fn listing(&self) -> (String, Vec<String>) {
        let exports = self.exports();
        let mut twice = Vec::new();
        let mut lines = BTreeSet::new();
        let mut foreign = BTreeMap::<String, BTreeSet<String>>::new();
        let public_path = |module: &[String], name: &str| -> Option<String> {
            exports.get(&(module.to_vec(), name.to_owned())).map(|paths| paths[0].clone())
        };
        for ((module, name), paths) in &exports {
            if paths.len() > 1 {
                twice.push(format!("{name}: {}", paths.join(", ")));
            }
            match module.first().map(String::as_str) {
                Some("<external>") => {
                    lines.insert(format!("pub use {} = {name}", paths[0]));
                    continue;
                }
                Some("<macro>") => {
                    let maker = &module[1..];
                    lines.insert(format!(
                        "pub {name} (made by a macro call in {})",
                        display(self.krate, maker, "").trim_end_matches("::")
                    ));
                    for call in self.module(maker).map(macro_calls).unwrap_or_default() {
                        lines.insert(format!(
                            "macro call in {}: {call}",
                            display(self.krate, maker, "").trim_end_matches("::")
                        ));
                    }
                    continue;
                }
                _ => {}
            }
            let defining = self.module(module).expect("exports name known modules");
            let item = defining.items.iter().find(|i| item_name(i).as_deref() == Some(name.as_str())).expect("defined");
            let at = &paths[0];
            for line in item_lines(self.krate, item, at) {
                for external in self.foreign_types(module, &line) {
                    foreign.entry(external).or_default().insert(at.clone());
                }
                lines.insert(line);
            }
        }
        // Inherent methods and trait impls, wherever the impl block sits.
        for module in &self.modules {
            for item in &module.items {
                let syn::Item::Impl(block) = item else { continue };
                let Some(self_name) = type_name(&block.self_ty) else { continue };
                let Resolved::Local(m, n) = self.resolve(&module.path, &self_name, 0) else { continue };
                let Some(at) = public_path(&m, &n) else { continue };
                if let Some((_, trait_path, _)) = &block.trait_ {
                    let trait_name = tokens(trait_path);
                    if is_private_trait(self, &exports, &module.path, trait_path) {
                        continue;
                    }
                    lines.insert(format!("impl {trait_name} for {at}"));
                    continue;
                }
                for member in &block.items {
                    let syn::ImplItem::Fn(f) = member else { continue };
                    if !matches!(f.vis, syn::Visibility::Public(_)) || !active(self.krate, &f.attrs) || hidden(&f.attrs)
                    {
                        continue;
                    }
                    let line = format!("pub fn {at}::{}", signature_rest(&f.sig));
                    for external in self.foreign_types(&module.path, &line) {
                        foreign.entry(external).or_default().insert(format!("{at}::{}", f.sig.ident));
                    }
                    lines.insert(line);
                }
            }
        }
        let mut text: Vec<String> = lines.into_iter().collect();
        text.push(String::new());
        text.push("# Types of other crates named by public signatures (see docs/embedding.md)".into());
        for (external, users) in foreign {
            text.push(format!("{external}: {}", users.into_iter().collect::<Vec<_>>().join(", ")));
        }
        (text.join("\n"), twice)
    }

    /// The types of other crates a listed line names, resolved from `module`'s imports.
    fn foreign_types(&self, module: &[String], line: &str) -> Vec<String> {
        let mut found = Vec::new();
        // Derived traits are listed on the item's line, not named by a signature.
        let line = line.rfind("] ").map_or(line, |end| &line[end + 2..]);
        for word in line.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')) {
            let segments: Vec<String> = word.split("::").filter(|s| !s.is_empty()).map(str::to_owned).collect();
            let Some(first) = segments.first() else { continue };
            if !first.chars().next().is_some_and(char::is_alphabetic) || *first == self.krate.name {
                continue;
            }
            let resolved = if segments.len() == 1 {
                self.resolve(module, first, 0)
            } else {
                self.resolve_path(module, &segments, 0)
            };
            if let Resolved::External(path) = resolved {
                let root = path.split("::").next().unwrap_or_default();
                if !LANGUAGE_CRATES.contains(&root) {
                    found.push(path);
                }
            }
        }
        found
    }
}

#[derive(Debug)]
enum Resolved {
    Local(Vec<String>, String),
    External(String),
    Unknown,
}

/// The module a written path's prefix names, seen from `from`.
fn target_module(from: &[String], target: &[String]) -> Vec<String> {
    let (mut module, rest) = strip_keywords(from, &target[..target.len() - 1]);
    module.extend(rest.iter().cloned());
    module
}

/// Applies a path's leading `crate` or `self` and its `super`s to module `from`: the module
/// they name, and the rest of the path.
fn strip_keywords<'a>(from: &[String], path: &'a [String]) -> (Vec<String>, &'a [String]) {
    let mut module = from.to_vec();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            module.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        _ => {}
    }
    while rest.first().map(String::as_str) == Some("super") {
        module.pop();
        rest = &rest[1..];
    }
    (module, rest)
}

/// The item-making macro calls of a module (`events! { … }`), each as one line of its
/// arguments without doc comments.
fn macro_calls(module: &Module) -> Vec<String> {
    module
        .items
        .iter()
        .filter_map(|item| match item {
            syn::Item::Macro(m) if m.ident.is_none() => {
                let name = tokens(&m.mac.path);
                let body: String = m
                    .mac
                    .tokens
                    .clone()
                    .into_iter()
                    .filter(|t| !matches!(t, proc_macro2::TokenTree::Punct(p) if p.as_char() == '#'))
                    .filter(|t| !matches!(t, proc_macro2::TokenTree::Group(g) if g.delimiter() == proc_macro2::Delimiter::Bracket))
                    .collect::<proc_macro2::TokenStream>()
                    .to_string();
                Some(format!("{name}! {{ {} }}", compact(&body)))
            }
            _ => None,
        })
        .collect()
}

fn display(krate: &Crate, module: &[String], name: &str) -> String {
    std::iter::once(krate.name.as_str())
        .chain(module.iter().map(String::as_str))
        .chain([name])
        .collect::<Vec<_>>()
        .join("::")
}

/// A trait impl is listed unless the trait is one of the runtime's own that is not public.
fn is_private_trait(
    surface: &Surface,
    exports: &BTreeMap<(Vec<String>, String), Vec<String>>,
    module: &[String],
    trait_path: &syn::Path,
) -> bool {
    let segments: Vec<String> = trait_path.segments.iter().map(|s| s.ident.to_string()).collect();
    let resolved = if segments.len() == 1 {
        surface.resolve(module, &segments[0], 0)
    } else {
        surface.resolve_path(module, &segments, 0)
    };
    match resolved {
        Resolved::Local(m, n) => !exports.contains_key(&(m, n)),
        _ => false,
    }
}

fn has_glob(tree: &syn::UseTree) -> bool {
    match tree {
        syn::UseTree::Path(p) => has_glob(&p.tree),
        syn::UseTree::Group(g) => g.items.iter().any(has_glob),
        syn::UseTree::Glob(_) => true,
        _ => false,
    }
}

/// Calls `add(Some(name), path)` for each name a `use` brings in and `add(None, module)` for
/// each glob.
fn flatten_use(tree: &syn::UseTree, prefix: Vec<String>, add: &mut dyn FnMut(Option<String>, Vec<String>)) {
    match tree {
        syn::UseTree::Path(p) => {
            let mut prefix = prefix;
            prefix.push(p.ident.to_string());
            flatten_use(&p.tree, prefix, add);
        }
        syn::UseTree::Name(n) => {
            let name = n.ident.to_string();
            if name == "self" {
                let last = prefix.last().cloned().expect("`self` after a path");
                add(Some(last), prefix);
            } else {
                let mut target = prefix;
                target.push(name.clone());
                add(Some(name), target);
            }
        }
        syn::UseTree::Rename(r) => {
            let mut target = prefix;
            target.push(r.ident.to_string());
            add(Some(r.rename.to_string()), target);
        }
        syn::UseTree::Group(g) => {
            for tree in &g.items {
                flatten_use(tree, prefix.clone(), add);
            }
        }
        syn::UseTree::Glob(_) => add(None, prefix),
    }
}

fn attrs_of(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        _ => &[],
    }
}

fn item_name(item: &syn::Item) -> Option<String> {
    Some(match item {
        syn::Item::Const(i) => i.ident.to_string(),
        syn::Item::Enum(i) => i.ident.to_string(),
        syn::Item::Fn(i) => i.sig.ident.to_string(),
        syn::Item::Mod(i) => i.ident.to_string(),
        syn::Item::Static(i) => i.ident.to_string(),
        syn::Item::Struct(i) => i.ident.to_string(),
        syn::Item::Trait(i) => i.ident.to_string(),
        syn::Item::Type(i) => i.ident.to_string(),
        syn::Item::Macro(i) => i.ident.as_ref()?.to_string(),
        _ => return None,
    })
}

fn is_pub(item: &syn::Item) -> bool {
    let vis = match item {
        syn::Item::Const(i) => &i.vis,
        syn::Item::Enum(i) => &i.vis,
        syn::Item::Fn(i) => &i.vis,
        syn::Item::Mod(i) => &i.vis,
        syn::Item::Static(i) => &i.vis,
        syn::Item::Struct(i) => &i.vis,
        syn::Item::Trait(i) => &i.vis,
        syn::Item::Type(i) => &i.vis,
        syn::Item::Macro(i) => return i.attrs.iter().any(|a| a.path().is_ident("macro_export")),
        _ => return false,
    };
    matches!(vis, syn::Visibility::Public(_))
}

/// `#[cfg(…)]` evaluated for the crate's features, outside tests.
fn active(krate: &Crate, attrs: &[syn::Attribute]) -> bool {
    attrs.iter().filter(|a| a.path().is_ident("cfg")).all(|a| {
        let meta: syn::Meta = a.parse_args().expect("a cfg predicate");
        cfg_holds(krate, &meta)
    })
}

fn cfg_holds(krate: &Crate, meta: &syn::Meta) -> bool {
    match meta {
        syn::Meta::Path(p) => !p.is_ident("test") && !p.is_ident("windows"),
        syn::Meta::NameValue(nv) if nv.path.is_ident("feature") => {
            let syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) = &nv.value else { return false };
            krate.features.contains(&s.value())
        }
        syn::Meta::NameValue(_) => true,
        syn::Meta::List(list) => {
            let inner: Vec<syn::Meta> = list
                .parse_args_with(syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated)
                .expect("cfg arguments")
                .into_iter()
                .collect();
            if list.path.is_ident("not") {
                !cfg_holds(krate, &inner[0])
            } else if list.path.is_ident("all") {
                inner.iter().all(|m| cfg_holds(krate, m))
            } else if list.path.is_ident("any") {
                inner.iter().any(|m| cfg_holds(krate, m))
            } else {
                false
            }
        }
    }
}

fn hidden(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| a.path().is_ident("doc") && tokens(&a.meta).contains("hidden"))
}

/// The attributes that are part of the contract: derives and `non_exhaustive`.
fn contract_attrs(attrs: &[syn::Attribute]) -> String {
    let mut out = String::new();
    for attr in attrs {
        if attr.path().is_ident("derive") || attr.path().is_ident("non_exhaustive") {
            out.push_str(&tokens(attr));
            out.push(' ');
        }
    }
    out
}

fn item_lines(krate: &Crate, item: &syn::Item, at: &str) -> Vec<String> {
    let mut lines = Vec::new();
    match item {
        syn::Item::Struct(s) => {
            lines.push(format!("{}pub struct {at}{}", contract_attrs(&s.attrs), tokens(&s.generics)));
            for (i, field) in s.fields.iter().enumerate() {
                if matches!(field.vis, syn::Visibility::Public(_)) && active(krate, &field.attrs) {
                    let name = field.ident.as_ref().map_or_else(|| i.to_string(), ToString::to_string);
                    lines.push(format!("pub field {at}::{name}: {}", tokens(&field.ty)));
                }
            }
        }
        syn::Item::Enum(e) => {
            lines.push(format!("{}pub enum {at}{}", contract_attrs(&e.attrs), tokens(&e.generics)));
            for variant in e.variants.iter().filter(|v| active(krate, &v.attrs)) {
                let fields = fields_text(&variant.fields);
                lines.push(format!("variant {at}::{}{fields}", variant.ident));
            }
        }
        syn::Item::Trait(t) => {
            let bounds = if t.supertraits.is_empty() { String::new() } else { format!(": {}", tokens(&t.supertraits)) };
            lines.push(format!("pub trait {at}{}{bounds}", tokens(&t.generics)));
            for member in &t.items {
                if let syn::TraitItem::Fn(f) = member {
                    if active(krate, &f.attrs) {
                        let provided = if f.default.is_some() { " (provided)" } else { "" };
                        lines.push(format!("trait fn {at}::{}{provided}", signature_rest(&f.sig)));
                    }
                }
            }
        }
        syn::Item::Fn(f) => {
            let module = at.rsplit_once("::").map_or(at, |(module, _)| module);
            lines.push(format!("pub fn {module}::{}", signature_rest(&f.sig)));
        }
        syn::Item::Const(c) => lines.push(format!("pub const {at}: {}", tokens(&c.ty))),
        syn::Item::Static(s) => lines.push(format!("pub static {at}: {}", tokens(&s.ty))),
        syn::Item::Type(t) => lines.push(format!("pub type {at}{} = {}", tokens(&t.generics), tokens(&t.ty))),
        syn::Item::Macro(_) => lines.push(format!("macro {at}")),
        _ => {}
    }
    lines
}

/// A variant's fields without their attributes: `{ a: A, b: B }` or `(A, B)`.
fn fields_text(fields: &syn::Fields) -> String {
    match fields {
        syn::Fields::Unit => String::new(),
        syn::Fields::Named(named) => {
            let each: Vec<String> = named
                .named
                .iter()
                .map(|f| format!("{}: {}", f.ident.as_ref().expect("named"), tokens(&f.ty)))
                .collect();
            format!(" {{ {} }}", each.join(", "))
        }
        syn::Fields::Unnamed(unnamed) => {
            format!("({})", unnamed.unnamed.iter().map(|f| tokens(&f.ty)).collect::<Vec<_>>().join(", "))
        }
    }
}

/// `name<generics>(inputs) -> output where …`, without `pub fn`.
fn signature_rest(sig: &syn::Signature) -> String {
    let asyncness = if sig.asyncness.is_some() { "async " } else { "" };
    let inputs = sig.inputs.iter().map(tokens).collect::<Vec<_>>().join(", ");
    let output = match &sig.output {
        syn::ReturnType::Default => String::new(),
        syn::ReturnType::Type(_, ty) => format!(" -> {}", tokens(ty)),
    };
    let bounds = sig.generics.where_clause.as_ref().map(|w| format!(" {}", tokens(w))).unwrap_or_default();
    format!("{}{}({inputs}){output}{bounds} {asyncness}", sig.ident, tokens(&sig.generics)).trim_end().to_owned()
}

fn type_name(ty: &syn::Type) -> Option<String> {
    match ty {
        syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
        _ => None,
    }
}

/// Tokens as compact text: `Option<Arc<dyn Fs>>`, not `Option < Arc < dyn Fs > >`.
fn tokens(node: &impl ToTokens) -> String {
    compact(&node.to_token_stream().to_string())
}

fn compact(raw: &str) -> String {
    let mut text = raw.replace("- >", "->").replace("= >", "=>");
    for (from, to) in [
        (" :: ", "::"),
        (":: ", "::"),
        (" ::", "::"),
        (" : ", ": "),
        ("< ", "<"),
        (" <", "<"),
        (" >", ">"),
        (" ,", ","),
        ("( ", "("),
        (" (", "("),
        (" )", ")"),
        ("[ ", "["),
        (" ]", "]"),
        ("& ", "&"),
        ("' ", "'"),
        ("# [", "#["),
        (" ;", ";"),
        (" ?", "?"),
        ("! {", "! {"),
    ] {
        while text.contains(from) {
            text = text.replace(from, to);
        }
    }
    // Put back the spaces the rules above took from arrows and bounds.
    text.replace("->", " -> ").replace("  ", " ").replace("( -> ", "(->")
}
