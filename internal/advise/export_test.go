package advise

// Recommend runs the recommendation on a report built by a test.
func (r *Report) Recommend() { r.recommend() }

// TrainDictionary trains the bytea candidate's dictionary on values and
// returns its size and ratio, and whether a value round-trips through its
// encoder and decoder.
func TrainDictionary(values [][]byte) (size int, ratio float64, roundTrip bool, err error) {
	d, err := trainDictionary(values)
	if err != nil {
		return 0, 0, false, err
	}
	defer d.Close()
	out, err := d.dec.DecodeAll(d.enc.EncodeAll(values[0], nil), nil)
	return len(d.raw), d.ratio, err == nil && string(out) == string(values[0]), nil
}
