"""Placeholder replaced by the term-discovery view."""

from eagle_probe.fit.base import Context, ViewResult, register


@register("terms")
def terms_view(ctx: Context) -> ViewResult:
    return ViewResult("terms", {"layers": []})
