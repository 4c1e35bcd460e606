package riverjob

// DeleteRunningSQL is the statement DeleteRunning runs.
const DeleteRunningSQL = deleteRunning
