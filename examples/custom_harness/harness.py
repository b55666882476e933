"""The harness: write the agent's config below the rollout's private HOME, run ``agent.py``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from openforge import Harness, HarnessResult, RolloutContext

AGENT = Path(__file__).with_name("agent.py")  # shown read-only in the sandbox (Harness.agent_files)


class MyAgent(Harness):
    name = "my-agent"
    wire_api = "chat"

    async def run(self, ctx: RolloutContext) -> HarnessResult:
        cfg = {"base_url": ctx.openai_base_url, "api_key": ctx.api_key, "model": ctx.model}
        await ctx.write_home_file(".my-agent.json", json.dumps(cfg))
        res = await ctx.exec([sys.executable, str(AGENT), ctx.instruction])
        out = HarnessResult.from_exec(res, harness=self.name, budget_s=ctx.budget_s)
        out.final_text = res.stdout.strip() or None
        return out
