DROP INDEX IF EXISTS {{.ExpiresIndexQualified}};
ALTER TABLE {{.Table}} DROP COLUMN IF EXISTS {{.ExpiresColumn}};
