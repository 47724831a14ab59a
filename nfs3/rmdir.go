package nfs3

// RMDIR (RFC 1813 section 3.3.13, RMDIR: remove a directory) takes DirOpArgs and
// returns WccRes (RMDIR3res: the directory's wcc_data in both arms).
