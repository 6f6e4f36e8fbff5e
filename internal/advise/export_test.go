package advise

// Recommend runs the recommendation on a report built by a test.
func (r *Report) Recommend() { r.recommend() }
