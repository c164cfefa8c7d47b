"""A verifiers 0.4.0 taskset plugin for tests/envs/bridges/verifiers_episodes.py (taskset id ``vf-guess``): guess a
number from 1 to 10 in at most four tries; the env answers "higher" or "lower", the reward is 1 if guessed.

A multi-turn verifiers env written the way verifiers' own game envs are (``Env.run`` drives an
``agent.interaction``), with no tools: what ``VerifiersTextEnv`` can play offline.
"""

from __future__ import annotations

import verifiers.v1 as vf

SECRETS = (3, 7, 10)
MAX_GUESSES = 4


class GuessData(vf.TaskData):
    secret: int


class GuessTask(vf.Task[GuessData, vf.State, vf.TaskConfig]):
    @vf.reward
    async def solved(self, trace) -> float:
        return float(trace.info.get("solved", False))

    @vf.metric
    async def guesses(self, trace) -> float:
        return float(trace.info.get("guesses", 0))


class GuessTaskset(vf.Taskset[GuessTask, vf.TasksetConfig]):
    def load(self):
        for i, secret in enumerate(SECRETS):
            yield GuessTask(GuessData(id=f"guess-{i}", secret=secret, system_prompt="You play a guessing game.",
                                      prompt="I am thinking of a number from 1 to 10. Reply with one number."),
                            self.config.task)


class GuessEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig()


class GuessEnv(vf.Env[GuessEnvConfig]):
    async def run(self, task, agents) -> None:
        async with agents.agent.interaction(task) as interaction:
            segment = await interaction.turn()
            guesses = 0
            while not segment.terminated and guesses < MAX_GUESSES:
                guesses += 1
                try:
                    n = int(segment.last_reply)
                except ValueError:
                    segment = await interaction.turn("Reply with one whole number.")
                    continue
                if n == task.data.secret:
                    interaction.trace.info["solved"] = True
                    break
                segment = await interaction.turn("higher" if n < task.data.secret else "lower")
            interaction.trace.info["guesses"] = guesses


__all__ = ["GuessEnv", "GuessTaskset"]
