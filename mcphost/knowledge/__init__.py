"""Knowledge bases: `bases.py` (ingest, incremental re-ingest, retrieval through `stores/knowledge.py`)
and `chunking.py` (documents → chunks: Markdown, text, HTML; pure).
"""
