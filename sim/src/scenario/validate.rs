//! A scenario read and checked: parsing, writing back, and every bound and combination a
//! file may not break, refused with the field that is wrong.

use super::faults::*;
use super::schema::*;

impl Scenario {
    /// The script the model host serves.
    pub fn script(&self) -> crate::model_server::Script {
        crate::model_server::Script {
            refuse_until_ms: self.model.refuse_until_ms,
            responses: self.model.responses.clone(),
            repeat_last: self.model.repeat_last,
            after_tool_result: None,
        }
    }

    /// Parses and checks a scenario file.
    pub fn parse(text: &str) -> Result<Scenario, String> {
        let scenario: Scenario = faultline_runtime::llm::from_toml(text).map_err(|e| e.to_string())?;
        scenario.check()?;
        Ok(scenario)
    }

    /// The file text of this scenario (what `faultline shrink` writes).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("scenarios serialise to TOML")
    }

    /// Refuses scenarios the simulator cannot run meaningfully, naming the field.
    pub fn check(&self) -> Result<(), String> {
        self.check_timing()
            .and_then(|()| self.check_faults())
            .and_then(|()| self.check_provenance())
            .and_then(|()| self.check_sizes())
            .and_then(|()| self.check_zombie())
            .and_then(|()| self.check_formats())
            .map_err(|e| format!("scenario {}: {e}", self.name))
    }

    /// At least one wire format, each once.
    fn check_formats(&self) -> Result<(), String> {
        if self.formats.is_empty() {
            return Err("formats: name at least one of openai, anthropic, gemini".into());
        }
        let distinct: std::collections::BTreeSet<_> = self.formats.iter().collect();
        if distinct.len() != self.formats.len() {
            return Err("formats: each format once".into());
        }
        Ok(())
    }

    /// The tick, the budget, the heal time and a workload to run.
    fn check_timing(&self) -> Result<(), String> {
        if !(TICK_MS_MIN..=TICK_MS_MAX).contains(&self.tick_ms) {
            return Err(format!("tick_ms must be {TICK_MS_MIN}..={TICK_MS_MAX}, got {}", self.tick_ms));
        }
        if self.budget_ms == 0 || self.budget_ms > BUDGET_MS_MAX {
            return Err(format!("budget_ms must be 1..={BUDGET_MS_MAX}, got {}", self.budget_ms));
        }
        if let Some(heal) = self.heal_at_ms.filter(|heal| *heal >= self.budget_ms) {
            return Err(format!("heal_at_ms ({heal}) must come before budget_ms ({})", self.budget_ms));
        }
        if self.messages.is_empty() && !self.generated {
            return Err("messages must not be empty".to_owned());
        }
        Ok(())
    }

    /// Fault knobs that only mean something together.
    fn check_faults(&self) -> Result<(), String> {
        // Kinds with no rot to apply them to would be a scenario that tests less than it says.
        if let Some(fs) = self.faults.fs.as_ref().filter(|fs| fs.torn_mid_line) {
            if fs.block_size.is_none() || fs.crash_before_op.is_none() {
                return Err("faults.fs.torn_mid_line needs block_size and crash_before_op".to_owned());
            }
        }
        if self.faults.cancel_at_ms.is_some() && self.faults.cancel_after_first_text_ms.is_some() {
            return Err("give faults.cancel_at_ms or cancel_after_first_text_ms, not both".to_owned());
        }
        if let Some(full) = self.faults.disk_full.filter(|full| full.from_ms >= full.to_ms) {
            return Err(format!("faults.disk_full.from_ms ({}) must come before to_ms ({})", full.from_ms, full.to_ms));
        }
        if !self.faults.rot_kinds.is_empty() && self.faults.bit_rot.is_none() && !self.faults.from_seed {
            return Err("faults.rot_kinds needs faults.bit_rot".to_owned());
        }
        if self.faults.rot_after_hole && self.faults.bit_rot.is_none() {
            return Err("faults.rot_after_hole needs faults.bit_rot".to_owned());
        }
        if let Some(person) = &self.faults.person {
            person.check()?;
        }
        for tool in &self.tools {
            let deadline_max = faultline_runtime::approval::APPROVAL_DEADLINE_MS_MAX;
            if tool.approval_deadline_ms.is_some_and(|ms| !(1..=deadline_max).contains(&ms)) {
                return Err(format!("tools.{}.approval_deadline_ms must be 1..={deadline_max}", tool.name));
            }
            if tool.approval_deadline_ms.is_some() && !tool.approval {
                return Err(format!("tools.{}.approval_deadline_ms needs approval = true", tool.name));
            }
        }
        Ok(())
    }

    /// The regression's planted bug and the real run's settings.
    fn check_provenance(&self) -> Result<(), String> {
        // A misspelt bug would make the regression's "fails with its bug" check plant nothing.
        if let Some(bug) = self.regression.as_ref().map(|r| r.bug.as_str()).filter(|b| !b.is_empty()) {
            if !faultline_runtime::testing::bugs::CATALOG.iter().any(|(known, _)| *known == bug) {
                return Err(format!("regression.bug {bug:?} is not in the planted-bug catalog"));
            }
        }
        if !(1..=REAL_TIME_SCALE_MAX).contains(&self.real.time_scale) {
            return Err(format!("real.time_scale must be 1..={REAL_TIME_SCALE_MAX}, got {}", self.real.time_scale));
        }
        if self.real.sim_only.as_deref().is_some_and(|why| why.trim().is_empty()) {
            return Err("real.sim_only must say why".to_owned());
        }
        Ok(())
    }

    /// The limits on what a scenario holds: messages, responses, answers, tool outputs.
    fn check_sizes(&self) -> Result<(), String> {
        if self.messages.len() > MESSAGES_MAX {
            return Err(format!("at most {MESSAGES_MAX} messages, got {}", self.messages.len()));
        }
        if let Some(max) = self.faults.answer_bytes_max {
            if !(ANSWER_BYTES_MAX_MIN..=faultline_runtime::store::ANSWER_BYTES_MAX).contains(&max) {
                return Err(format!(
                    "faults.answer_bytes_max must be {ANSWER_BYTES_MAX_MIN}..={}, got {max}",
                    faultline_runtime::store::ANSWER_BYTES_MAX
                ));
            }
        }
        if let Some(tool) =
            self.tools.iter().find(|t| t.output_bytes.is_some_and(|n| n > TOOL_OUTPUT_BYTES_SCENARIO_MAX))
        {
            return Err(format!("tools.{}.output_bytes must be at most {TOOL_OUTPUT_BYTES_SCENARIO_MAX}", tool.name));
        }
        for tool in &self.tools {
            let Some(text) = tool.parameters.as_deref() else { continue };
            let schema: serde_json::Value = serde_json::from_str(text)
                .map_err(|e| format!("tools.{}.parameters must be a JSON object's text: {e}", tool.name))?;
            if let Err((path, message)) = faultline_runtime::tool::check_parameters(&schema) {
                let at = if path.is_empty() { String::new() } else { format!(".{path}") };
                return Err(format!("tools.{}.parameters{at}: {message}", tool.name));
            }
        }
        if let Some(tool) = self.tools.iter().find(|t| !t.results.is_empty() && t.kind != ToolKind::Recorded) {
            return Err(format!("tools.{}.results needs kind = \"recorded\"", tool.name));
        }
        if let Some(tool) = self.tools.iter().find(|t| t.output_char.is_some() && t.output_bytes.is_none()) {
            return Err(format!("tools.{}.output_char needs output_bytes", tool.name));
        }
        if self.model.responses.len() > RESPONSES_MAX {
            return Err(format!("at most {RESPONSES_MAX} model responses, got {}", self.model.responses.len()));
        }
        Ok(())
    }

    /// The zombie family: a pause that outlasts the lease, inside the budget, sim-only.
    fn check_zombie(&self) -> Result<(), String> {
        if let Some(zombie) = &self.faults.zombie {
            if !ZOMBIE_LEASE_MS_RANGE.contains(&zombie.lease_ms) {
                return Err(format!(
                    "faults.zombie.lease_ms must be {}..={}, got {}",
                    ZOMBIE_LEASE_MS_RANGE.start(),
                    ZOMBIE_LEASE_MS_RANGE.end(),
                    zombie.lease_ms
                ));
            }
            if zombie.pause_ms <= zombie.lease_ms + zombie.standby_poll_ms {
                return Err("faults.zombie.pause_ms must outlast lease_ms and one standby_poll_ms".to_owned());
            }
            if zombie.pause_at_ms + zombie.pause_ms >= self.budget_ms || zombie.standby_poll_ms == 0 {
                return Err("faults.zombie must end within budget_ms and poll every ≥ 1 ms".to_owned());
            }
            if zombie.cut_percent > ZOMBIE_CUT_PERCENT_MAX {
                return Err(format!(
                    "faults.zombie.cut_percent must be 0..={ZOMBIE_CUT_PERCENT_MAX}, got {}",
                    zombie.cut_percent
                ));
            }
            if zombie.failover_at_ms.is_some_and(|at| at >= self.budget_ms) {
                return Err("faults.zombie.failover_at_ms must fall within budget_ms".to_owned());
            }
            if self.real.sim_only.is_none() {
                return Err("faults.zombie runs in the simulator only: say so in real.sim_only".to_owned());
            }
        }
        Ok(())
    }
}
