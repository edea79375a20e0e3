// Package top lays out the frames of 'fence top': the lock table, with a
// header on the cluster, as lines of text.
//
// # Basics
//
// Render is a pure function: a State (the locks and members as last read,
// and when) and a View (the terminal's size, the row limit, the order)
// give the lines of one frame, at a given now. The TTLs left and the hold
// times in the table count from the State's Read instant to now, so a
// frame drawn between two reads still counts down. Rate turns grant
// events, or the highest token seen by successive reads, into grants per
// second.
//
// # Caveats
//
// Lock names and owner labels are anyone's strings: a cell that holds
// anything but printable ASCII is shown quoted (%+q), so no name can move
// the cursor or write over the screen. The lines carry no escape sequences;
// placing them on the screen is the caller's job.
package top
