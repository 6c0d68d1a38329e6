"""Validators shared by every app's names and titles."""

import unicodedata

from django.core.exceptions import ValidationError
from django.utils.deconstruct import deconstructible

# Control (Cc), format (Cf: bidi overrides and isolates, zero-width space/joiners, BOM, soft
# hyphen), line/paragraph separators, surrogates and private use: never part of a name someone
# typed, and the way to make one name look like another (U+202E turns "acme-invoice" into text
# that reads backwards) or to hide one inside another (U+200B).
REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


@deconstructible
class DisplayTextValidator:
    """A name or title shown to people: printable text only (tabs and newlines too are refused)."""

    message = "contains {what} (U+{code:04X}) at position {position}; names take printable characters only"
    code = "control_character"

    def __call__(self, value):
        for position, char in enumerate(str(value), start=1):
            category = unicodedata.category(char)
            if category in REFUSED_CATEGORIES:
                what = {
                    "Cc": "a control character",
                    "Cf": "an invisible formatting character (bidi override, zero-width or similar)",
                }.get(category, "a character that is not printable text")
                raise ValidationError(self.message.format(what=what, code=ord(char), position=position), code=self.code)

    def __eq__(self, other):
        return isinstance(other, DisplayTextValidator)


validate_display_text = DisplayTextValidator()
