"""A harness with a sub-agent, for the ATIF tests: a lead agent that delegates the task through a
``delegate`` tool to a worker agent with a ``bash`` tool (``agent.py`` beside this file, real OpenAI SDK,
real proxy). The worker's calls are a second lineage of the rollout."""

from __future__ import annotations

import sys
from pathlib import Path

from openforge import Harness, HarnessResult, RolloutContext

AGENT = Path(__file__).with_name("agent.py")


class Delegating(Harness):
    name = "delegating"
    wire_api = "chat"

    async def run(self, ctx: RolloutContext) -> HarnessResult:
        res = await ctx.exec([sys.executable, str(AGENT), ctx.openai_base_url, ctx.model, ctx.instruction])
        out = HarnessResult.from_exec(res, harness=self.name, budget_s=ctx.budget_s)
        out.final_text = res.stdout.strip() or None
        return out
