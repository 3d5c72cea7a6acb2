-- create_saga_table: Sales_OrderSaga
CREATE TABLE "ORDERSAGA" (
    ID VARCHAR2(38) NOT NULL,
    METADATA CLOB NOT NULL,
    DATA CLOB NOT NULL,
    PERSISTENCEVERSION VARCHAR2(23) NOT NULL,
    SAGATYPEVERSION VARCHAR2(23) NOT NULL,
    CONCURRENCY NUMBER(9) NOT NULL,
    CONSTRAINT "ORDERSAGA_PK" PRIMARY KEY (ID) ENABLE
)
/
ALTER TABLE "ORDERSAGA" ADD ("CORR_ORDERID" VARCHAR2(38))
/
CREATE UNIQUE INDEX "SAGAIDX_FD8BAD844CFBBE419E43FE" ON "ORDERSAGA" ("CORR_ORDERID" ASC)
/
ALTER TABLE "ORDERSAGA" ADD ("CORR_ORDERNUMBER" NUMBER(19))
/
CREATE UNIQUE INDEX "SAGAIDX_599F57BA89CF9D164E3CFF" ON "ORDERSAGA" ("CORR_ORDERNUMBER" ASC)
/
-- add_saga_correlation: Sales_OrderSaga
ALTER TABLE "ORDERSAGA" ADD ("CORR_ORDERNUMBER" NUMBER(19))
/
CREATE UNIQUE INDEX "SAGAIDX_599F57BA89CF9D164E3CFF" ON "ORDERSAGA" ("CORR_ORDERNUMBER" ASC)
/
-- drop_saga_correlation (promotion, guarded): Sales_OrderSaga
DECLARE
    pending NUMBER;
BEGIN
    SELECT COUNT(*) INTO pending FROM "ORDERSAGA" WHERE "CORR_ORDERNUMBER" IS NULL AND ROWNUM = 1;
    IF pending > 0 THEN
        RAISE_APPLICATION_ERROR(-20001, 'refusing to drop CORR_ORDERID of saga table "ORDERSAGA": some rows still have CORR_ORDERNUMBER NULL (the backfill is not done). Backfill it first: sqltransport-schema pipeline backfill --property OrderNumber --column CORR_ORDERNUMBER (PostgreSQL), or e.g. UPDATE "ORDERSAGA" SET "CORR_ORDERNUMBER" = <the saga data''s OrderNumber> WHERE "CORR_ORDERNUMBER" IS NULL, or let the endpoint update each saga (every update writes CORR_ORDERNUMBER); then run the upgrade again');
    END IF;
END;
/
DROP INDEX "SAGAIDX_FD8BAD844CFBBE419E43FE"
/
ALTER TABLE "ORDERSAGA" DROP COLUMN "CORR_ORDERID"
/
-- drop_saga_correlation (abandoned transition): Sales_OrderSaga
DROP INDEX "SAGAIDX_599F57BA89CF9D164E3CFF"
/
ALTER TABLE "ORDERSAGA" DROP COLUMN "CORR_ORDERNUMBER"
/
-- drop_saga_table (refused while it holds sagas): Sales_OrderSaga
DECLARE
    pending NUMBER;
BEGIN
    SELECT COUNT(*) INTO pending FROM "ORDERSAGA" WHERE 1 = 1 AND ROWNUM = 1;
    IF pending > 0 THEN
        RAISE_APPLICATION_ERROR(-20001, 'refusing to drop saga table "ORDERSAGA": it still holds saga instances (sagas in progress). Let them complete first, or list the table under discard: in topology.yaml to drop it with its data');
    END IF;
END;
/
DROP TABLE "ORDERSAGA"
/
-- drop_saga_table (discarding): Sales_OrderSaga
DROP TABLE "ORDERSAGA"
/
