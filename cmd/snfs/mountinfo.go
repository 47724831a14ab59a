package main

// mountAt returns the topmost mount on dir (an absolute, clean path), if
// any: mountinfo lists mounts in the order they were made, so the last one
// on dir is the one in view.
func mountAt(dir string) (e mountEntry, ok bool, err error) {
	ms, err := mountsAt(dir)
	if err != nil || len(ms) == 0 {
		return e, false, err
	}
	return ms[len(ms)-1], true, nil
}
