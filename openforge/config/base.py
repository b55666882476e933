"""The base of every config section: a pydantic model that refuses unknown keys (``extra="forbid"``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Section"]


class Section(BaseModel):
    """A config section: unknown keys are errors, never ignored."""

    model_config = ConfigDict(extra="forbid")
