-- The lowest thresholds of a limit, kept beside its list (issue 25;
-- docs/postgres.md "Thresholds and events"): th_min_amount is the least
-- amount threshold ("4500"), th_min_pct the least percentage ("80%" as 80),
-- each NULL when the list has none of that kind. budgetd_put_limit keeps
-- them; budgetd_fillup_batch uses them to see, with two comparisons, that a
-- batch leaves every threshold unreached (a use below both
-- th_min_amount and capacity × th_min_pct × 0.01), without parsing the list.
ALTER TABLE limits ADD COLUMN th_min_amount numeric;
ALTER TABLE limits ADD COLUMN th_min_pct numeric;
UPDATE limits
   SET th_min_amount = (SELECT min(t::numeric) FROM unnest(thresholds) AS t WHERE right(t, 1) <> '%'),
       th_min_pct = (SELECT min(left(t, -1)::numeric) FROM unnest(thresholds) AS t WHERE right(t, 1) = '%')
 WHERE cardinality(thresholds) > 0;
