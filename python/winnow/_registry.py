"""Open plans by id: the torch ops take a plan as an int (an op schema holds no Python
object), and look it up here at call and at trace time."""
import itertools
import weakref

_ids = itertools.count(1)
_plans = weakref.WeakValueDictionary()


def new_id():
    return next(_ids)


def add(plan):
    _plans[plan.id] = plan


def remove(plan):
    _plans.pop(plan.id, None)


def open_plans():
    """The plans open now."""
    return list(_plans.values())


def get(plan_id, kind):
    """The open plan `plan_id` of class `kind`; ValueError otherwise."""
    plan = _plans.get(plan_id)
    if plan is None or not isinstance(plan, kind):
        raise ValueError(f"winnow: no open {kind.__name__} with id {plan_id} (closed plans are "
                         "forgotten)")
    return plan
