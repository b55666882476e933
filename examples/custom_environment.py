"""A custom Python environment: arithmetic tasks whose answer the agent writes to ``answer.txt``.

Run it by reference (``PYTHONPATH=examples``, see docs/sdk.md) as ``custom_environment:ArithmeticEnvironment``,
or by its entry point ``arith`` once ``pip install ./examples`` registered it.
"""

from __future__ import annotations

from openforge import Environment, Sandbox, Task, VerifyResult

PAIRS = [(17, 25), (8, 34), (120, 7), (45, 45), (3, 99), (61, 12)]


class ArithmeticEnvironment(Environment):
    """Add two numbers and write the sum to answer.txt."""

    name = "arith"

    def __init__(self, n_eval: int = 2):
        self.n_eval = n_eval

    def tasks(self, split: str | None = None) -> list[Task]:
        out = []
        for i, (a, b) in enumerate(PAIRS):
            out.append(Task(
                id=f"sum-{a}-{b}",
                instruction=f"Compute {a} + {b} and write only the number to the file answer.txt.",
                environment=self.name,
                split="eval" if i < self.n_eval else "train",
                category="easy",  # `env.subset=easy` (the test preset's) selects it
                timeout_s=60,
                metadata={"answer": a + b, "solution": [f"echo {a + b} > answer.txt"]},
            ))
        return [t for t in out if split is None or t.split == split]

    async def setup(self, task: Task, sandbox: Sandbox) -> None:
        await sandbox.write_file("NOTES.txt", b"Write your answer to answer.txt in this directory.\n")

    async def verify(self, task: Task, sandbox: Sandbox) -> VerifyResult:
        # No answer.txt: read_file raises SandboxFileNotFound, and the rollout is a
        # policy_failure (reward 0, trained), not an env_error.
        text = (await sandbox.read_file("answer.txt")).decode(errors="replace").strip()
        return VerifyResult.from_checks({"answer": text == str(task.metadata["answer"])})
