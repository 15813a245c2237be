//! The simulator's public surface, as a reviewed list (`snapshots/it__public_api__public_api.snap`):
//! the embedder's harness at the root, the modules the `faultline` command and the tests reach
//! for, each item at one path. It is read by the same reader as the runtime's
//! (`runtime/tests/it/api_surface.rs`), for the default features of `Cargo.toml`.

use std::path::Path;

#[path = "../../../runtime/tests/it/api_surface.rs"]
mod api_surface;

#[test]
fn public_api() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let krate = api_surface::Crate::with_default_features(&root.join("Cargo.toml"));
    let (listing, twice) = api_surface::listing(&krate, &root.join("src"));
    assert!(twice.is_empty(), "public items reachable by more than one path (export each once):\n{}", twice.join("\n"));
    insta::assert_snapshot!("public_api", listing);
}
