"""The downstream study's machinery: SkillsBench/Harbor task folders as data (:mod:`.tasks`), the skill sets
a condition injects and the SKILL.md folders they are written as (:mod:`.skill_sets`), the ``harbor`` CLI
driven as an engine (:mod:`.harbor`) and the trials' results (:mod:`.trials`). A library below ``stages/``,
like ``train/`` and ``rerank/``: the stages in :mod:`skillrouter.stages.agents` declare what it builds."""
