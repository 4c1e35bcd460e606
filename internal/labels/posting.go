package labels

// PostingResult is what became of a handler's ledger posting: the result
// label of inbox_ledger_postings_total, which the worker sets.
type PostingResult string

// Posting results.
const (
	Posted  PostingResult = "posted"  // a ledger transaction was written
	Skipped PostingResult = "skipped" // already posted (by this envelope or under its business key)
)

// PostingResults are every PostingResult.
var PostingResults = []PostingResult{Posted, Skipped}

// PostingResultOf is Posted when posted, else Skipped.
func PostingResultOf(posted bool) PostingResult {
	if posted {
		return Posted
	}
	return Skipped
}
