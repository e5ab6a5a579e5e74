"""`python -m connector.options`: the options table as Markdown; `--update FILE` rewrites a doc's tables,
`--java FILE` writes TableOptions.java."""

import sys

from connector.options.generate import options_java, options_markdown, update_docs

if sys.argv[1:2] == ["--update"] and len(sys.argv) == 3:
    print(f"{sys.argv[2]}: {'updated' if update_docs(sys.argv[2]) else 'up to date'}")
elif sys.argv[1:2] == ["--java"] and len(sys.argv) == 3:
    from pathlib import Path

    Path(sys.argv[2]).write_text(options_java(), encoding="utf-8")
else:
    sys.stdout.write(options_markdown())
