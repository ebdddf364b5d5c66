"""The pages' frame is Django's own: every ultimate_jobs page extends ``admin/change_list.html`` (the lists
and the overviews) or ``admin/change_form.html`` (a job, a confirmation) and fills their blocks, so its
breadcrumbs, the place of its filters and its search bar are those of the Django version that runs it
(Django 5.2 draws ``<div class="breadcrumbs">`` and the filters after the list; Django 6.1 an
``<ol class="breadcrumbs">`` and a ``<search>`` panel inside the list's container).

Django's change list template and its tags read a ``ChangeList``, which is built over a queryset; these
pages read the operator instead. :class:`PageList` carries what the template reads of one.

>>> cl = PageList(opts=Job._meta, filter_specs=(...), search_fields=SEARCHED, query="order:1042")
>>> render(request, "admin/ultimate_jobs/job_list.html", {"cl": cl, ...})
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django.db.models.options import Options

    from .filters import ChoiceFilter, TypedFilter


@dataclass(frozen=True)
class PageList:
    """What ``admin/change_list.html`` — its breadcrumbs, ``filters`` and ``search`` blocks, and the
    ``search_form`` and ``admin_list_filter`` tags — reads of Django's ``ChangeList``: the model's
    ``opts``, the filters, the search box's text and help, the query string the search form carries
    along, and the rows on the page (whose count is the result count: the operator's lists page by
    cursor and count nothing, so no "N results (M total)" is drawn)."""

    opts: Options[Any]
    filter_specs: Sequence[ChoiceFilter | TypedFilter] = ()
    search_fields: tuple[str, ...] = ()  # what the search box matches; none: no search box
    search_help_text: str = ""
    query: str = ""  # the search box's text
    params: dict[str, str] = field(default_factory=dict)  # carried along by the search form
    has_active_filters: bool = False
    clear_all_filters_qs: str = "?"
    result_list: Sequence[Any] = ()
    # what a queryset change list may have and these pages never do
    formset: None = None
    date_hierarchy: None = None
    is_facets_optional: bool = False
    add_facets: bool = False
    is_popup: bool = False

    @property
    def has_filters(self) -> bool:
        """Whether the filter panel is drawn."""
        return bool(self.filter_specs)

    @property
    def result_count(self) -> int:
        """The rows on this page."""
        return len(self.result_list)

    @property
    def full_result_count(self) -> int:
        """The same as :attr:`result_count`: the search form then draws no "N results (M total)"."""
        return len(self.result_list)
