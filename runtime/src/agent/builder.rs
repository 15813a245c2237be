//! `Agent::builder()`: the one way to start an agent, with defaults for everything an
//! embedder need not choose (production seams, no tools, default knobs, a new session).

use std::sync::Arc;

use super::{Agent, AgentConfig, Open};
use crate::llm::{Credentials, LiveProvider, ResolvedProvider};
use crate::store::{SessionId, Store};
use crate::tool::ToolSet;
use crate::{seams::Seams, Result};

/// Builds an [`Agent`]. Required: the provider route and its credentials (given to
/// [`Agent::builder`]); then a store and a session id at [`AgentBuilder::start`].
#[must_use = "an agent builder does nothing until `start`"]
pub struct AgentBuilder {
    provider: Arc<LiveProvider>,
    credentials: Arc<dyn Credentials>,
    seams: Option<Seams>,
    tools: ToolSet,
    config: AgentConfig,
    open: Open,
}

impl std::fmt::Debug for AgentBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentBuilder").field("open", &self.open).field("config", &self.config).finish_non_exhaustive()
    }
}

impl AgentBuilder {
    pub(super) fn new(provider: Arc<LiveProvider>, credentials: Arc<dyn Credentials>) -> Self {
        Self {
            provider,
            credentials,
            seams: None,
            tools: ToolSet::new(),
            config: AgentConfig::default(),
            open: Open::Create,
        }
    }

    /// The clock, network, filesystem, entropy and process seams (default:
    /// [`crate::production::seams`]). The simulator passes its own here.
    pub fn seams(mut self, seams: Seams) -> Self {
        self.seams = Some(seams);
        self
    }

    /// The tools the model may call (default: none).
    pub fn tools(mut self, tools: ToolSet) -> Self {
        self.tools = tools;
        self
    }

    /// The agent's knobs (default: [`AgentConfig::default`]).
    pub fn config(mut self, config: AgentConfig) -> Self {
        self.config = config;
        self
    }

    /// Create a new session (the default) or resume one ([`Open::Resume`]: crash repair,
    /// taking over a dead owner).
    pub fn open(mut self, open: Open) -> Self {
        self.open = open;
        self
    }

    /// Starts the agent on session `id` of `store`. Must be called inside a tokio runtime.
    pub fn start(self, store: &dyn Store, id: &SessionId) -> Result<Agent> {
        let seams = self.seams.unwrap_or_else(crate::production::seams);
        Agent::start(seams, store, id, self.open, self.provider, self.credentials, self.tools, self.config)
    }
}

impl Agent {
    /// An agent talking to `provider` with `credentials`; see [`AgentBuilder`].
    pub fn builder(provider: impl Into<ProviderRoute>, credentials: Arc<dyn Credentials>) -> AgentBuilder {
        AgentBuilder::new(provider.into().0, credentials)
    }
}

/// A provider route for [`Agent::builder`]: a resolved `[provider]` section, or a
/// [`LiveProvider`] the caller keeps to reload its configuration later.
#[derive(Debug, Clone)]
pub struct ProviderRoute(Arc<LiveProvider>);

impl From<ResolvedProvider> for ProviderRoute {
    fn from(route: ResolvedProvider) -> Self {
        Self(Arc::new(LiveProvider::new(route)))
    }
}

impl From<Arc<LiveProvider>> for ProviderRoute {
    fn from(live: Arc<LiveProvider>) -> Self {
        Self(live)
    }
}
