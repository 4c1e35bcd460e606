package envelope

// FinishManySQL is FinishMany's statement, for its plan's test.
const FinishManySQL = finishManySQL
