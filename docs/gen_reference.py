"""mkdocs-gen-files script: the reference pages, generated from the code at every build (never committed)."""

import mkdocs_gen_files

from wapflow._docs import PAGES

for path, markdown in PAGES.items():
    with mkdocs_gen_files.open(path, "w") as page:
        page.write(markdown())
