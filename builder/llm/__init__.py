"""One LLM client for every stage: structured outputs, retries, the per-item re-ask loop, cache, recording replay, batches."""

from builder.llm.cache import LLMCache
from builder.llm.client import CacheMissError, LLMClient, LLMError, Reply, RequestFailed
from builder.llm.config import LLMSettings
from builder.llm.items import ItemProblem, ItemsOutcome, Rejected, per_item

__all__ = ["CacheMissError", "ItemProblem", "ItemsOutcome", "LLMCache", "LLMClient", "LLMError", "LLMSettings", "Rejected",
           "Reply", "RequestFailed", "per_item"]
