"""The evidence's rules on their own: what an honest installer writes is told from a forgery."""

from __future__ import annotations

import pytest

from oc_repl.tasks.installers import console_script as is_console_script


@pytest.mark.parametrize("inside_if", [False, True], ids=["import-on-top", "import-inside-if"])
def test_both_templates_of_pips_console_script_are_known(inside_if):
    """distlib's older template imports the entry point at the top, the newer one inside the `if`."""
    body = "from pytest import console_main\nif __name__ == '__main__':\n"
    if inside_if:
        body = "if __name__ == '__main__':\n    from pytest import console_main\n"
    text = "#!/usr/bin/python3\n# -*- coding: utf-8 -*-\nimport re\nimport sys\n" + body
    text += "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n    sys.exit(console_main())\n"
    assert is_console_script(text.encode(), {"/usr/bin/python3"})
    assert not is_console_script(text.replace("console_main()", "0").encode(), {"/usr/bin/python3"})
