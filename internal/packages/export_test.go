package packages

// HoldTurn takes m's turn, as a running operation does, until release is
// called.
func HoldTurn(in *Installer, m Manager) (release func()) {
	in.turns[m] <- struct{}{}
	return func() { <-in.turns[m] }
}
