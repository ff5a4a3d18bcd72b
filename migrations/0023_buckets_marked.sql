-- Who is near the cap (SPEC "Who is near the cap", docs/api.md): a listing
-- of the buckets past one of a limit's thresholds reads this index of the
-- buckets that hold a mark, by the list of thresholds the marks are of and
-- key, instead of every bucket of the limit. Buckets without a mark (most of
-- them) are not in it, so it costs a write only when a bucket's marks
-- change from or to none.
CREATE INDEX buckets_marked ON buckets (limit_id, th_sig, key) WHERE th_above <> 0;
