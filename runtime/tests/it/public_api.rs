//! The runtime's public surface, as a reviewed list: a change to what an embedder can name
//! (an item, a signature, a field, a variant, a trait impl, a dependency type) changes the
//! snapshot `snapshots/it__public_api__public_api.snap`, and CI (`INSTA_UPDATE=no`) fails until
//! the change is reviewed and committed with the code. The list is what `api_surface.rs` reads
//! for the default features of `Cargo.toml` (no `testing`); an item reachable by two paths
//! fails the test.

use std::path::Path;

use super::api_surface::{listing, Crate};

#[test]
fn public_api() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let krate = Crate::with_default_features(&root.join("Cargo.toml"));
    assert!(krate.features.contains("postgres"), "the defaults as Cargo.toml states them: {:?}", krate.features);
    let (listing, twice) = listing(&krate, &root.join("src"));
    assert!(twice.is_empty(), "public items reachable by more than one path (export each once):\n{}", twice.join("\n"));
    insta::assert_snapshot!("public_api", listing);
}
