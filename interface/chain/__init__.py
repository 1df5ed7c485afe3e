"""Reports of the blockchain watcher (deposits, sendouts): routes and shapes."""
