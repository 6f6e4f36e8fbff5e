package dialect

// TargetedBatchKeys returns the most distinct keys an `= ANY` of constant
// keys may hold for Greenplum's planner to send it only to the segments
// that hold them, on a table spread over segments segments (its
// gp_distribution_policy.numsegments): 3 × segments - 1. With more keys
// the planner does not work out their segments ("don't bother for ones
// which will likely hash to many segments", cdbtargeteddispatch.c) and the
// query goes to every segment: with 3 × segments random keys, about 95% of
// the segments hold one of them anyway. It returns 0 for no segments.
func TargetedBatchKeys(segments int) int {
	if segments <= 0 {
		return 0
	}
	return 3*segments - 1
}
