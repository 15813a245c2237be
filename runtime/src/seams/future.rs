//! The future every asynchronous seam operation returns.

use std::future::Future;
use std::pin::Pin;

/// A boxed, sendable future: the return type of every asynchronous seam operation, so that
/// the traits stay object-safe and a whole world of seams can be passed as `Arc<dyn _>`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
